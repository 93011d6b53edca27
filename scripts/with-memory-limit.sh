#!/usr/bin/env bash
# Runs a command under a memory limit in a new cgroup, then removes the cgroup.
# The same rules as gigas-cgroup (crates/cgroup) and the binaries' --memory-limit flag.
set -euo pipefail

PROG=with-memory-limit.sh
HOW_TO_FIX="run as root, or delegate a cgroup to your user (systemd-run --user --scope -p MemoryMax=8G -p Delegate=yes -- COMMAND ...), or run the command without a limit"

usage() {
	cat <<'EOF'
Usage: scripts/with-memory-limit.sh SIZE -- COMMAND [ARG...]

Runs COMMAND under a memory limit of SIZE bytes, in a new cgroup that is removed when
COMMAND exits. The page cache COMMAND reads counts against the limit, as its heap does;
swap is held to the same limit (v1 memory.memsw.limit_in_bytes, v2 memory.swap.max = 0),
so a command that needs more anonymous memory than SIZE is OOM-killed.

SIZE is a whole number of bytes with an optional binary unit: 512M, 512MiB, 8G, 8GiB,
1073741824 (K, M, G, T are powers of 1024 whatever their spelling).

The cgroup:
  cgroup v2  PARENT/gigas-NAME-PID with memory.max = SIZE, where PARENT is this script's
             own cgroup, or its parent when the own cgroup holds processes (v2 lets a
             cgroup either hold processes or give the memory controller to children).
  cgroup v1  OWN/gigas-NAME-PID under the memory hierarchy, memory.limit_in_bytes = SIZE.
NAME is COMMAND's base name and PID this script's. Cgroups of earlier runs whose PID is
gone and that hold no process are removed first (left by a run that was killed).

COMMAND runs as a child: its exit status is this script's (128+N when killed by signal N);
TERM, HUP, QUIT, USR1, USR2 and INT sent to the script are passed on (INT only when the
script is not in a terminal's foreground, where the terminal already sent it to COMMAND).
A message on stderr says when the kernel OOM-killed something in the cgroup.

Exit status 125: the limit could not be set up (the message says why and how to fix it).

Environment:
  GIGAS_CGROUP_ROOT  a directory standing for /sys/fs/cgroup (tests): cgroup v2 when it
                     has cgroup.controllers, else v1 at GIGAS_CGROUP_ROOT/memory.
EOF
}

die() {
	echo "$PROG: error: $*" >&2
	exit 125
}

# Bytes of a size such as 512MiB, 8G or 1073741824.
parse_size() {
	local s=${1// /} n u m bytes
	local expected="expected a whole number of bytes, optionally with a binary unit: 512MiB, 512M, 8GiB, 8G, 1073741824"
	[[ $s =~ ^([0-9]+)([A-Za-z]*)$ ]] || die "invalid size '$1': $expected"
	n=${BASH_REMATCH[1]}
	u=${BASH_REMATCH[2],,}
	case $u in
	'' | b) m=1 ;;
	k | kb | kib) m=$((1 << 10)) ;;
	m | mb | mib) m=$((1 << 20)) ;;
	g | gb | gib) m=$((1 << 30)) ;;
	t | tb | tib) m=$((1 << 40)) ;;
	*) die "invalid size '$1': unknown unit (use K, M, G or T, with or without iB); $expected" ;;
	esac
	n=$((10#$n))
	# Beyond 18 digits bash's 64-bit arithmetic can wrap.
	((${#BASH_REMATCH[1]} <= 18)) || die "invalid size '$1': it does not fit in 64 bits"
	bytes=$((n * m))
	((bytes / m == n)) || die "invalid size '$1': it does not fit in 64 bits"
	((bytes > 0)) || die "invalid size '$1': a limit of 0 bytes cannot run anything"
	echo "$bytes"
}

# Runs "$@" (a redirection into a cgroup file, in a subshell); on failure dies with the
# reason and, where privilege or the mount is the cause, how to fix it.
write_or_die() {
	local what=$1 file=$2 value=$3 err
	if ! err=$( { printf '%s' "$value" >"$file"; } 2>&1); then
		err=${err##*: }
		case $err in
		*"ermission denied"* | *"ot permitted"*) die "permission denied to $what $file; $HOW_TO_FIX" ;;
		*"ead-only"*) die "cannot $what $file: the cgroup file system is read-only (as in most containers); run where /sys/fs/cgroup is writable, or $HOW_TO_FIX" ;;
		*) die "cannot $what $file: $err" ;;
		esac
	fi
}

has_word() { # has_word WORD FILE
	[[ -r $2 ]] && [[ " $(tr '\n' ' ' <"$2") " == *" $1 "* ]]
}

# --- arguments --------------------------------------------------------------------------
if [[ $# -eq 0 ]]; then
	usage >&2
	exit 125
fi
case $1 in -h | --help)
	usage
	exit 0
	;;
esac
[[ $# -ge 3 && $2 == "--" ]] || die "usage: $PROG SIZE -- COMMAND [ARG...] (see --help)"
SIZE_ARG=$1
BYTES=$(parse_size "$1")
shift 2
CMD=("$@")

# --- where the memory hierarchy is, and this process's cgroup in it ----------------------
VERSION="" MOUNT="" OWN=""
ROOT=${GIGAS_CGROUP_ROOT:-}
if [[ -n $ROOT ]]; then
	if [[ -f $ROOT/cgroup.controllers ]]; then
		has_word memory "$ROOT/cgroup.controllers" ||
			die "no cgroup memory controller is available: the cgroup v2 hierarchy at $ROOT lacks it (cgroup.controllers: $(tr '\n' ' ' <"$ROOT/cgroup.controllers")); $HOW_TO_FIX"
		VERSION=2 MOUNT=$ROOT OWN=$ROOT
	elif [[ -d $ROOT/memory ]]; then
		VERSION=1 MOUNT=$ROOT/memory OWN=$ROOT/memory
	else
		die "no cgroup memory controller is available: $ROOT has neither cgroup.controllers (cgroup v2) nor a memory directory (cgroup v1); $HOW_TO_FIX"
	fi
else
	v2_mount="" v2_root="" v1_mount="" v1_root=""
	while IFS= read -r line; do
		read -r _ _ _ mroot mpoint _ <<<"${line%% - *}"
		read -r fstype _ superopts <<<"${line#* - }"
		printf -v mpoint '%b' "$mpoint"
		printf -v mroot '%b' "$mroot"
		if [[ $fstype == cgroup2 && -z $v2_mount ]] && has_word memory "$mpoint/cgroup.controllers"; then
			v2_mount=$mpoint v2_root=$mroot
		elif [[ $fstype == cgroup && ,$superopts, == *,memory,* && -z $v1_mount ]]; then
			v1_mount=$mpoint v1_root=$mroot
		fi
	done </proc/self/mountinfo
	path=""
	if [[ -n $v2_mount ]]; then
		VERSION=2 MOUNT=$v2_mount mroot=$v2_root
		path=$(sed -n 's/^0:://p' /proc/self/cgroup)
	elif [[ -n $v1_mount ]]; then
		VERSION=1 MOUNT=$v1_mount mroot=$v1_root
		path=$(sed -En 's/^[0-9]+:([^:]*,)?memory(,[^:]*)?://p' /proc/self/cgroup)
	else
		die "no cgroup memory controller is available: no cgroup v2 hierarchy with the memory controller and no cgroup v1 memory hierarchy in /proc/self/mountinfo; mount one, or $HOW_TO_FIX"
	fi
	mroot=${mroot%/}
	if [[ -z $mroot ]]; then
		rel=$path
	elif [[ $path == "$mroot" || $path == "$mroot"/* ]]; then
		rel=${path#"$mroot"}
	else
		rel=/
	fi
	OWN=$MOUNT${rel%/}
	[[ -d $OWN ]] || OWN=$MOUNT
fi

PARENT=$OWN
if [[ $VERSION == 2 ]]; then
	if [[ $OWN != "$MOUNT" ]] && ! has_word memory "$OWN/cgroup.controllers"; then
		die "cgroup v2: the memory controller is not enabled for $OWN; enable it from the parent (echo +memory > PARENT/cgroup.subtree_control), or $HOW_TO_FIX"
	fi
	if ! has_word memory "$OWN/cgroup.subtree_control"; then
		if ! err=$( { printf '+memory' >"$OWN/cgroup.subtree_control"; } 2>&1); then
			if [[ $err == *"resource busy"* && $OWN != "$MOUNT" ]]; then
				# The own cgroup holds processes (this script): v2 then gives no controller
				# to its children. A leaf beside it works: the parent enables memory already.
				PARENT=$(dirname "$OWN")
			elif [[ $err == *"ermission denied"* || $err == *"ot permitted"* ]]; then
				die "permission denied to enable the memory controller in $OWN/cgroup.subtree_control; $HOW_TO_FIX"
			elif [[ $err == *"ead-only"* ]]; then
				die "cannot enable the memory controller in $OWN: the cgroup file system is read-only; $HOW_TO_FIX"
			else
				die "cannot enable the memory controller in $OWN/cgroup.subtree_control: ${err##*: }"
			fi
		fi
	fi
fi

# --- remove what killed runs left: gigas-*-PID with PID gone and no process inside ------
for stale in "$PARENT"/gigas-*-*; do
	[[ -d $stale ]] || continue
	pid=${stale##*-}
	[[ $pid =~ ^[0-9]+$ && $pid != "$$" ]] || continue
	# Running unless gone or a zombie (killed, not yet reaped: already out of the cgroup).
	if state=$(cat "/proc/$pid/stat" 2>/dev/null); then
		state=${state##*) }
		[[ ${state%% *} == [ZX] ]] || continue
	fi
	if [[ -r $stale/cgroup.procs && -z $(<"$stale/cgroup.procs") ]]; then
		rmdir "$stale" 2>/dev/null && echo "$PROG: removed the stale cgroup $stale" >&2 || true
	fi
done

# --- the cgroup ---------------------------------------------------------------------------
name=$(basename -- "${CMD[0]}")
name=${name//[^A-Za-z0-9_]/_}
name=${name:0:32}
DIR=$PARENT/gigas-${name:-cmd}-$$
CREATED=""

cleanup() {
	[[ -n $CREATED && -d $DIR ]] || return 0
	local i
	# Exiting tasks leave the cgroup asynchronously: a short, bounded wait.
	for i in $(seq 1 20); do
		rmdir "$DIR" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "$PROG: warning: $DIR still holds processes ($(tr '\n' ' ' <"$DIR/cgroup.procs" 2>/dev/null)); left in place (the next run removes it once they are gone)" >&2
}
trap cleanup EXIT

if ! err=$(mkdir "$DIR" 2>&1); then
	case $err in
	*"ermission denied"* | *"ot permitted"*) die "permission denied to create the cgroup $DIR; $HOW_TO_FIX" ;;
	*"ead-only"*) die "cannot create the cgroup $DIR: the cgroup file system is read-only (as in most containers); run where /sys/fs/cgroup is writable, or $HOW_TO_FIX" ;;
	*) die "cannot create the cgroup $DIR: ${err##*: }" ;;
	esac
fi
CREATED=1
SWAP="swap not accounted"
if [[ $VERSION == 1 ]]; then
	[[ -f $DIR/memory.limit_in_bytes ]] || die "$DIR/memory.limit_in_bytes does not exist: $DIR is not a memory cgroup (is the memory controller mounted there?)"
	write_or_die "set the memory limit in" "$DIR/memory.limit_in_bytes" "$BYTES"
	if [[ -f $DIR/memory.memsw.limit_in_bytes ]]; then
		write_or_die "set the memory+swap limit in" "$DIR/memory.memsw.limit_in_bytes" "$BYTES"
		SWAP="swap held to the same limit"
	fi
	LIMIT=$(<"$DIR/memory.limit_in_bytes")
else
	[[ -f $DIR/memory.max ]] || die "$DIR/memory.max does not exist: $DIR is not a cgroup v2 memory cgroup"
	write_or_die "set the memory limit in" "$DIR/memory.max" "$BYTES"
	if [[ -f $DIR/memory.swap.max ]]; then
		write_or_die "forbid swap in" "$DIR/memory.swap.max" 0
		SWAP="swap held to the same limit"
	fi
	LIMIT=$(<"$DIR/memory.max")
fi
echo "$PROG: memory limit $SIZE_ARG ($LIMIT bytes) in cgroup v$VERSION $DIR, $SWAP" >&2

# --- the command, as a child that moves itself into the cgroup before exec ----------------
# The script stays outside so that it can remove the cgroup afterwards. `<&0` keeps the
# command's stdin (a background job's would be /dev/null).
bash -c 'echo $$ >"$1" || exit 125; shift; exec "$@"' "$PROG" "$DIR/cgroup.procs" "${CMD[@]}" <&0 &
child=$!

forward() { kill -s "$1" "$child" 2>/dev/null || true; }
forward_int() {
	# From a terminal, INT already reached COMMAND (same foreground process group).
	local stat rest pgrp tpgid
	stat=$(<"/proc/$$/stat")
	rest=${stat##*) }
	read -r _ _ pgrp _ _ tpgid _ <<<"$rest"
	[[ $pgrp == "$tpgid" ]] || forward INT
}
for sig in TERM HUP QUIT USR1 USR2; do
	# shellcheck disable=SC2064 # the signal name is fixed now, on purpose
	trap "forward $sig" "$sig"
done
trap forward_int INT

set +e
while :; do
	wait "$child"
	status=$?
	# wait returns early (>128) when a trapped signal arrives; the child may still run.
	kill -0 "$child" 2>/dev/null || break
done
set -e

if [[ $VERSION == 1 ]]; then
	kills=$(awk '$1 == "oom_kill" { print $2 }' "$DIR/memory.oom_control" 2>/dev/null || true)
else
	kills=$(awk '$1 == "oom_kill" { print $2 }' "$DIR/memory.events" 2>/dev/null || true)
fi
if [[ ${kills:-0} -gt 0 ]]; then
	echo "$PROG: the kernel OOM-killed $kills process(es) in $DIR: they needed more than $SIZE_ARG ($LIMIT bytes) of memory that could not be reclaimed" >&2
fi
exit "$status"
