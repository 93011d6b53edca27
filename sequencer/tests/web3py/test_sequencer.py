"""web3.py, unchanged, against a dev gigas-sequencer.

Run by sequencer/tests/web3py.rs with the virtual environment's python:

    python test_sequencer.py http://127.0.0.1:PORT

It signs transactions of every accepted type with eth-account, deploys and calls a contract,
reads receipts, balances, blocks, logs, estimates and fees over HTTP, follows `newHeads` and
`logs` subscriptions over WebSocket, and checks that rejections reach the caller with the node's
words. Each check prints one line; the first failure raises and exits non-zero.
"""

import asyncio
import sys
import time

from eth_account import Account
from hexbytes import HexBytes
from web3 import AsyncWeb3, Web3, WebSocketProvider
from web3.exceptions import Web3RPCError
from web3.utils.address import get_create_address

CHAIN_ID = 1337
GWEI = 10**9
ETH = 10**18
# The first dev accounts of the test mnemonic (m/44'/60'/0'/0/i).
KEYS = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
]
ALICE = Account.from_key(KEYS[0])
BOB = Account.from_key(KEYS[1])
CAROL = Account.from_key(KEYS[2])
TOPIC = "0x" + "00" * 28 + "deadbeef"
RECEIVER = Web3.to_checksum_address("0x00000000000000000000000000000000000b0b02")
TIMEOUT = 30


def runtime_code() -> bytes:
    """With calldata: LOG2(TOPIC, caller) carrying the calldata, and slot 0 = its first word.
    Always returns slot 0. The same program as the alloy test's."""
    code = bytearray([0x36, 0x15, 0x60, 0x00, 0x57])  # CALLDATASIZE ISZERO PUSH1 read JUMPI
    code += bytes([0x36, 0x5F, 0x5F, 0x37])  # CALLDATACOPY(0, 0, CALLDATASIZE)
    code += bytes([0x33])  # CALLER (topic 1)
    code += bytes([0x7F]) + bytes.fromhex(TOPIC[2:])  # PUSH32 TOPIC (topic 0)
    code += bytes([0x36, 0x5F, 0xA2])  # LOG2(0, CALLDATASIZE, TOPIC, CALLER)
    code += bytes([0x5F, 0x35, 0x5F, 0x55])  # SSTORE(0, CALLDATALOAD(0))
    read = len(code)
    code += bytes([0x5B, 0x5F, 0x54, 0x5F, 0x52, 0x60, 0x20, 0x5F, 0xF3])  # return SLOAD(0)
    code[3] = read
    return bytes(code)


def init_code() -> bytes:
    runtime = runtime_code()
    return bytes([0x60, len(runtime), 0x80, 0x60, 0x09, 0x5F, 0x39, 0x5F, 0xF3]) + runtime


def ok(name: str, detail: str) -> None:
    print(f"ok  {name:<38} {detail}", flush=True)


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def send(w3: Web3, account, tx: dict) -> HexBytes:
    signed = account.sign_transaction(tx)
    return w3.eth.send_raw_transaction(signed.raw_transaction)


def receipt(w3: Web3, tx_hash: HexBytes):
    r = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=TIMEOUT, poll_latency=0.05)
    check(r["status"] == 1, f"transaction {tx_hash.to_0x_hex()} failed: {dict(r)}")
    return r


def fees(w3: Web3) -> tuple[int, int]:
    """(fee cap or gas price, tip) that any block in the next minute accepts."""
    base = w3.eth.get_block("latest")["baseFeePerGas"]
    return base * 2 + GWEI, GWEI


def expect_rejection(w3: Web3, name: str, account, tx: dict, words: list[str]) -> None:
    signed = account.sign_transaction(tx)
    try:
        w3.eth.send_raw_transaction(signed.raw_transaction)
    except Web3RPCError as e:
        error = (e.rpc_response or {}).get("error") or {}
        message = str(error.get("message", e.message))
        # Addresses may come checksummed or not.
        for w in words:
            check(w.lower() in message.lower(), f"{name}: expected {w!r} in the error, got {message!r}")
        ok(f"rejected: {name}", message)
        return
    raise AssertionError(f"{name}: the node accepted the transaction")


def http_checks(w3: Web3) -> tuple[str, int]:
    """Everything over HTTP. Returns the contract's address and alice's next nonce."""
    check(w3.is_connected(), "web3.py cannot connect")
    check(w3.eth.chain_id == CHAIN_ID, f"chain id {w3.eth.chain_id}")
    version = w3.client_version
    check(version.startswith("gigas"), f"client version {version}")
    ok("eth_chainId / clientVersion", f"{w3.eth.chain_id}, {version}")
    check(w3.net.version == str(CHAIN_ID), f"net_version {w3.net.version}")
    check(w3.eth.get_balance(BOB.address, 0) == 10_000 * ETH, "bob's genesis balance")
    ok("eth_getBalance at genesis", "10000 ETH")

    # Alice deploys the contract (nonce from the pending count, gas from an estimate).
    cap, tip = fees(w3)
    nonce = w3.eth.get_transaction_count(ALICE.address, "pending")
    deploy = {
        "type": 2,
        "chainId": CHAIN_ID,
        "nonce": nonce,
        "maxFeePerGas": cap,
        "maxPriorityFeePerGas": tip,
        "data": init_code(),
        "value": 0,
    }
    deploy["gas"] = w3.eth.estimate_gas({"from": ALICE.address, "data": init_code()})
    r = receipt(w3, send(w3, ALICE, deploy))
    contract = get_create_address(ALICE.address, nonce)
    check(r["contractAddress"] == contract, f"contract at {r['contractAddress']}, want {contract}")
    check(w3.eth.get_code(contract) == runtime_code(), "deployed code")
    ok("deploy (estimate_gas, CREATE)", f"{contract} in block {r['blockNumber']}, gas {r['gasUsed']}")
    nonce += 1

    # Bob: one transaction of each accepted type, in flight together.
    cap, tip = fees(w3)
    start = w3.eth.get_transaction_count(BOB.address, "pending")
    before = w3.eth.get_balance(RECEIVER)
    legacy = {
        "chainId": CHAIN_ID,
        "nonce": start,
        "gasPrice": cap,
        "gas": 21_000,
        "to": RECEIVER,
        "value": 1,
    }
    signed_legacy = BOB.sign_transaction(legacy)
    check(signed_legacy.v in (CHAIN_ID * 2 + 35, CHAIN_ID * 2 + 36), "EIP-155 v")
    access_list = {
        "type": 1,
        "chainId": CHAIN_ID,
        "nonce": start + 1,
        "gasPrice": cap,
        "gas": 30_000,
        "to": RECEIVER,
        "value": 2,
        "accessList": [{"address": RECEIVER, "storageKeys": ["0x" + "00" * 32]}],
    }
    dynamic = {
        "type": 2,
        "chainId": CHAIN_ID,
        "nonce": start + 2,
        "maxFeePerGas": cap,
        "maxPriorityFeePerGas": tip,
        "gas": 21_000,
        "to": RECEIVER,
        "value": 3,
    }
    # Carol delegates her account to the contract; bob pays for it.
    authorization = Account.sign_authorization(
        {
            "chainId": CHAIN_ID,
            "address": contract,
            "nonce": w3.eth.get_transaction_count(CAROL.address),
        },
        CAROL.key,
    )
    set_code = {
        "type": 4,
        "chainId": CHAIN_ID,
        "nonce": start + 3,
        "maxFeePerGas": cap,
        "maxPriorityFeePerGas": tip,
        "gas": 100_000,
        "to": CAROL.address,
        "value": 0,
        "data": b"",
        "accessList": [],
        "authorizationList": [authorization],
    }
    hashes = [w3.eth.send_raw_transaction(signed_legacy.raw_transaction)]
    for tx in (access_list, dynamic, set_code):
        hashes.append(send(w3, BOB, tx))
    for tx_hash, ty, name in zip(hashes, (0, 1, 2, 4), ("legacy (EIP-155)", "EIP-2930", "EIP-1559", "EIP-7702")):
        r = receipt(w3, tx_hash)
        check(r["type"] == ty, f"{name}: receipt type {r['type']}")
        tx = w3.eth.get_transaction(tx_hash)
        check(tx["from"] == BOB.address, f"{name}: from {tx['from']}")
        check(tx["blockNumber"] == r["blockNumber"], f"{name}: block number")
        check(tx["type"] == ty, f"{name}: transaction type {tx['type']}")
        ok(f"send {name}", f"type {ty}, block {r['blockNumber']}, gas {r['gasUsed']}")
    check(w3.eth.get_balance(RECEIVER) == before + 6, "the receiver got 1 + 2 + 3 wei")
    delegated = w3.eth.get_code(CAROL.address)
    check(delegated == HexBytes(b"\xef\x01\x00" + bytes.fromhex(contract[2:])), f"carol's code {delegated.hex()}")
    tx = w3.eth.get_transaction(hashes[3])
    check(len(tx["authorizationList"]) == 1, "the authorization list is returned")
    ok("EIP-7702 delegation", f"carol's code is 0xef0100 + {contract}")

    # Call the contract: estimate, send, a log, a stored word, read back by eth_call.
    word = b"\x42" * 32
    call = {"from": ALICE.address, "to": contract, "data": word}
    gas = w3.eth.estimate_gas(call)
    check(21_000 < gas < 100_000, f"estimate {gas}")
    cap, tip = fees(w3)
    r = receipt(
        w3,
        send(
            w3,
            ALICE,
            {
                "type": 2,
                "chainId": CHAIN_ID,
                "nonce": nonce,
                "maxFeePerGas": cap,
                "maxPriorityFeePerGas": tip,
                "gas": gas,
                "to": contract,
                "data": word,
                "value": 0,
            },
        ),
    )
    nonce += 1
    check(len(r["logs"]) == 1, f"logs {r['logs']}")
    log = r["logs"][0]
    check(log["address"] == contract, "log address")
    check(
        [t.to_0x_hex() for t in log["topics"]]
        == [TOPIC, "0x" + "00" * 12 + ALICE.address[2:].lower()],
        f"log topics {log['topics']}",
    )
    check(log["data"] == HexBytes(word), "log data")
    check(w3.eth.get_storage_at(contract, 0) == HexBytes(word), "slot 0")
    check(w3.eth.call({"to": contract}) == HexBytes(word), "eth_call")
    ok("contract call", f"estimate {gas}, used {r['gasUsed']}, log and slot 0 as sent")

    # Logs by address and topic over the whole chain.
    head = w3.eth.block_number
    found = w3.eth.get_logs({"fromBlock": 0, "toBlock": head, "address": contract, "topics": [TOPIC]})
    check(len(found) == 1, f"get_logs found {len(found)}")
    check(found[0]["transactionHash"] == r["transactionHash"], "get_logs transaction hash")
    ok("eth_getLogs address + topic", f"blocks 0..{head}: 1 log")

    # Blocks: by number with full transactions, by hash, receipts, the parent link.
    block = w3.eth.get_block(r["blockNumber"], full_transactions=True)
    check(any(t["hash"] == r["transactionHash"] for t in block["transactions"]), "tx in block")
    by_hash = w3.eth.get_block(block["hash"])
    check(by_hash["number"] == block["number"], "block by hash")
    check(len(by_hash["transactions"]) == len(block["transactions"]), "same transactions")
    parent = w3.eth.get_block(block["number"] - 1)
    check(block["parentHash"] == parent["hash"], "parent hash")
    receipts = w3.eth.get_block_receipts(block["number"])
    check(len(receipts) == len(block["transactions"]), "block receipts")
    check(w3.eth.get_block("latest")["number"] >= block["number"], "latest")
    check(w3.eth.get_block("earliest")["number"] == 0, "earliest")
    for tag in ("safe", "finalized", "pending"):
        w3.eth.get_block(tag)
    ok("blocks", f"{block['number']} by number (full) and hash, {len(receipts)} receipts")

    # Fees.
    history = w3.eth.fee_history(4, "latest", [25, 75])
    check(len(history["baseFeePerGas"]) == 5, f"fee history {history}")
    check(len(history["reward"]) == 4, "fee history rewards")
    price = w3.eth.gas_price
    check(price > 0, "gas price")
    check(w3.eth.max_priority_fee > 0, "max priority fee")
    ok("fees", f"gas price {price}, fee history {history['baseFeePerGas']}")

    # Rejections reach web3.py with the node's words.
    cap, tip = fees(w3)
    spent = {
        "type": 2,
        "chainId": CHAIN_ID,
        "nonce": start,
        "maxFeePerGas": cap,
        "maxPriorityFeePerGas": tip,
        "gas": 21_000,
        "to": RECEIVER,
        "value": 1,
    }
    next_nonce = w3.eth.get_transaction_count(BOB.address, "pending")
    expect_rejection(
        w3, "nonce too low", BOB, spent, ["nonce too low", f"next nonce {next_nonce}", f"tx nonce {start}"]
    )
    poor = Account.create()
    expect_rejection(
        w3,
        "insufficient funds",
        poor,
        dict(spent, nonce=0),
        ["insufficient funds for gas * price + value", poor.address, "have 0"],
    )
    expect_rejection(w3, "invalid chain id", BOB, dict(spent, nonce=next_nonce, chainId=1), ["invalid chain id"])
    expect_rejection(w3, "intrinsic gas too low", BOB, dict(spent, nonce=next_nonce, gas=20_000), ["intrinsic gas too low"])
    expect_rejection(
        w3, "exceeds block gas limit", BOB, dict(spent, nonce=next_nonce, gas=10**10), ["exceeds block gas limit"]
    )
    expect_rejection(
        w3,
        "fee cap under base fee",
        BOB,
        dict(spent, nonce=next_nonce, maxFeePerGas=1, maxPriorityFeePerGas=1),
        ["max fee per gas less than block base fee"],
    )
    return contract, nonce


async def subscriptions(ws_url: str, contract: str, nonce: int) -> None:
    """`newHeads` and `logs` over WebSocket, fed by a call sent on the same connection."""
    async with AsyncWeb3(WebSocketProvider(ws_url)) as w3:
        check(await w3.eth.chain_id == CHAIN_ID, "chain id over WebSocket")
        heads_id = await w3.eth.subscribe("newHeads")
        logs_id = await w3.eth.subscribe("logs", {"address": contract, "topics": [TOPIC]})
        base = (await w3.eth.get_block("latest"))["baseFeePerGas"]
        word = b"\x17" * 32
        signed = ALICE.sign_transaction(
            {
                "type": 2,
                "chainId": CHAIN_ID,
                "nonce": nonce,
                "maxFeePerGas": base * 2 + GWEI,
                "maxPriorityFeePerGas": GWEI,
                "gas": 100_000,
                "to": contract,
                "data": word,
                "value": 0,
            }
        )
        sent = await w3.eth.send_raw_transaction(signed.raw_transaction)
        heads = []
        logs = []

        async def collect() -> None:
            async for message in w3.socket.process_subscriptions():
                if message["subscription"] == heads_id:
                    heads.append(message["result"])
                elif message["subscription"] == logs_id:
                    logs.append(message["result"])
                if len(heads) >= 2 and logs:
                    return

        await asyncio.wait_for(collect(), TIMEOUT)
        check(heads[1]["number"] == heads[0]["number"] + 1, f"heads {heads[0]['number']}, {heads[1]['number']}")
        check(heads[1]["parentHash"] == heads[0]["hash"], "the second head's parent is the first")
        ok("newHeads subscription", f"blocks {heads[0]['number']}, {heads[1]['number']} in order")
        log = logs[0]
        check(log["transactionHash"] == sent, f"log of {log['transactionHash']}, sent {sent}")
        check(HexBytes(log["data"]) == HexBytes(word), "log data")
        ok("logs subscription", f"the call's log in block {log['blockNumber']}")
        check(await w3.eth.unsubscribe(heads_id), "unsubscribe newHeads")
        check(await w3.eth.unsubscribe(logs_id), "unsubscribe logs")
        ok("eth_unsubscribe", "both")


def forwarder_init_code(target: str) -> bytes:
    """A contract that CALLs `target` with its own calldata and returns the first word back:
    a transaction to it makes a call tree of two frames."""
    runtime = bytes([0x36, 0x5F, 0x5F, 0x37])  # CALLDATACOPY(0, 0, CALLDATASIZE)
    # CALL(GAS, target, 0, 0, CALLDATASIZE, 0, 32)
    runtime += bytes([0x60, 0x20, 0x5F, 0x36, 0x5F, 0x5F, 0x73]) + bytes.fromhex(target[2:])
    runtime += bytes([0x5A, 0xF1, 0x50])  # GAS CALL POP
    runtime += bytes([0x60, 0x20, 0x5F, 0xF3])  # RETURN(0, 32)
    return bytes([0x60, len(runtime), 0x80, 0x60, 0x09, 0x5F, 0x39, 0x5F, 0xF3]) + runtime


def wait_for(what: str, poll):
    """Calls `poll` until it returns something truthy, for at most TIMEOUT seconds."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        got = poll()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def filters_and_traces(w3: Web3, contract: str) -> None:
    """Installed filters (web3.py's filter objects over eth_newFilter, eth_newBlockFilter,
    eth_newPendingTransactionFilter and eth_getFilterChanges), then a call tree read back
    with debug_traceTransaction and the callTracer, and the default struct logger."""
    start = w3.eth.block_number
    logs = w3.eth.filter({"address": contract, "fromBlock": start})
    blocks = w3.eth.filter("latest")
    pending = w3.eth.filter("pending")
    check(logs.get_new_entries() == [], "a new log filter has no changes yet")
    ok("eth_newFilter / newBlockFilter / newPending", f"{logs.filter_id[:10]}.., from block {start}")

    cap, tip = fees(w3)
    nonce = w3.eth.get_transaction_count(ALICE.address, "pending")
    deploy = {
        "type": 2,
        "chainId": CHAIN_ID,
        "nonce": nonce,
        "maxFeePerGas": cap,
        "maxPriorityFeePerGas": tip,
        "gas": 200_000,
        "data": forwarder_init_code(contract),
        "value": 0,
    }
    receipt(w3, send(w3, ALICE, deploy))
    forwarder = get_create_address(ALICE.address, nonce)
    word = (0xF11E).to_bytes(32, "big")
    call = {
        "type": 2,
        "chainId": CHAIN_ID,
        "nonce": nonce + 1,
        "maxFeePerGas": cap,
        "maxPriorityFeePerGas": tip,
        "gas": 200_000,
        "to": forwarder,
        "data": word,
        "value": 0,
    }
    sent = send(w3, ALICE, call)
    r = receipt(w3, sent)

    entries = wait_for("the log filter's change", logs.get_new_entries)
    check(len(entries) == 1, f"one log, got {len(entries)}")
    check(entries[0]["transactionHash"] == sent, "the log filter's log is the call's")
    check(HexBytes(entries[0]["data"]) == HexBytes(word), "the log's data")
    check(logs.get_new_entries() == [], "a second poll has nothing new")
    every = logs.get_all_entries()
    check(any(e["transactionHash"] == sent for e in every), "eth_getFilterLogs has the log")
    ok("filter get_new_entries (logs)", f"the call's log in block {entries[0]['blockNumber']}")
    block_hashes = []
    wait_for(
        "the block filter to report the call's block",
        lambda: block_hashes.extend(blocks.get_new_entries()) or r["blockHash"] in block_hashes,
    )
    numbers = [w3.eth.get_block(h)["number"] for h in block_hashes]
    check(
        numbers[0] > start and numbers == list(range(numbers[0], numbers[0] + len(numbers))),
        f"every block after the filter, in order: {numbers}",
    )
    ok("filter get_new_entries (blocks)", f"{len(block_hashes)} hashes, blocks {numbers[0]}..{numbers[-1]}")
    seen = pending.get_new_entries()
    check(sent in seen, f"the pending filter saw the call ({len(seen)} hashes)")
    ok("filter get_new_entries (pending)", f"{len(seen)} transaction hashes")
    check(w3.eth.uninstall_filter(logs.filter_id), "eth_uninstallFilter")
    try:
        logs.get_new_entries()
        raise AssertionError("an uninstalled filter still answers")
    except Web3RPCError as e:
        check("filter not found" in str(e), f"uninstalled: {e}")
    ok("eth_uninstallFilter", "then 'filter not found'")

    trace = w3.manager.request_blocking("debug_traceTransaction", [sent, {"tracer": "callTracer"}])
    check(trace["type"] == "CALL", f"root frame {trace['type']}")
    check(trace["from"].lower() == ALICE.address.lower(), f"root from {trace['from']}")
    check(trace["to"].lower() == forwarder.lower(), f"root to {trace['to']}")
    check(int(trace["gasUsed"], 16) == r["gasUsed"], f"root gas {trace['gasUsed']} vs receipt {r['gasUsed']}")
    calls = trace.get("calls") or []
    check(len(calls) == 1, f"one inner call, got {len(calls)}")
    inner = calls[0]
    check(inner["type"] == "CALL", f"inner {inner['type']}")
    check(inner["from"].lower() == forwarder.lower(), f"inner from {inner['from']}")
    check(inner["to"].lower() == contract.lower(), f"inner to {inner['to']}")
    check(HexBytes(inner["input"]) == HexBytes(word), "inner input is the forwarded word")
    check(HexBytes(inner["output"]) == HexBytes(word), "the logging contract returns slot 0")
    ok("debug_traceTransaction callTracer", f"{trace['to'][:10]}.. -> {inner['to'][:10]}.., gas {r['gasUsed']}")
    structs = w3.manager.request_blocking("debug_traceTransaction", [sent, {"disableStorage": True}])
    check(structs["gas"] == r["gasUsed"], f"struct log gas {structs['gas']} vs {r['gasUsed']}")
    ops = [s["op"] for s in structs["structLogs"]]
    check(ops.count("CALL") == 1 and "LOG2" in ops, f"the struct log's CALL and LOG2: {len(ops)} steps")
    ok("debug_traceTransaction struct logger", f"{len(ops)} steps")
    traced_call = w3.manager.request_blocking(
        "debug_traceCall",
        [{"from": ALICE.address, "to": forwarder, "data": "0x" + word.hex()}, "latest", {"tracer": "callTracer"}],
    )
    check(len(traced_call.get("calls") or []) == 1, "debug_traceCall's call tree")
    ok("debug_traceCall callTracer", "one inner call")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: test_sequencer.py http://127.0.0.1:PORT")
    url = sys.argv[1]
    started = time.monotonic()
    import web3

    print(f"web3.py {web3.__version__} against {url}", flush=True)
    w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": TIMEOUT}))
    contract, nonce = http_checks(w3)
    asyncio.run(subscriptions(url.replace("http://", "ws://", 1), contract, nonce))
    filters_and_traces(w3, contract)
    print(f"all checks passed in {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
