//! Immutable files served from disk (the archive's diffs and blocks, snapshot manifests and
//! chunks): opened once, their ETag computed in one streamed pass, then sent in pieces read
//! on the blocking pool as the client takes them, so that an answer holds one piece in
//! memory whatever the file's length, and a client that stops reading holds nothing but its
//! connection (which the server cuts once no byte has gone out for its send timeout).

use std::fs::File;
use std::future::Future;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{header, HeaderMap, HeaderValue, StatusCode};
use hyper::body::{Body, Bytes, Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;

/// Bytes read and sent at a time.
pub const PIECE: usize = 64 << 10;

/// `Cache-Control` of a file that never changes once written.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// A file opened for an answer, with its length and ETag.
#[derive(Debug)]
pub struct OpenFile {
    file: File,
    len: u64,
    etag: String,
}

impl OpenFile {
    /// Opens `path` and computes its ETag: the first 16 bytes of BLAKE3 over `domain` and the
    /// file's bytes, in hex and quotes (what the archive's answers always carried). `None` when
    /// the file does not exist. Reads the whole file once, a piece at a time: call it on the
    /// blocking pool.
    pub fn open(path: &Path, domain: &[u8]) -> io::Result<Option<Self>> {
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut hasher = blake3::Hasher::new();
        hasher.update(domain);
        let mut buf = vec![0u8; PIECE];
        let mut len = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            len += n as u64;
        }
        file.seek(SeekFrom::Start(0))?;
        let hash = hasher.finalize();
        Ok(Some(Self {
            file,
            len,
            etag: format!("\"{}\"", hex::encode(&hash.as_bytes()[..16])),
        }))
    }

    /// The file's length when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its ETag, quoted.
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// The answer to a GET with `headers`: 304 when the client holds this version
    /// (`If-None-Match`), else 200 with the file streamed. Both carry the ETag and the
    /// immutable cache control; `permit`, if any, is held until the body is sent or dropped.
    pub fn respond(
        self,
        headers: &HeaderMap,
        content_type: &'static str,
        permit: Option<OwnedSemaphorePermit>,
    ) -> http::Response<FileBody> {
        let tag = HeaderValue::from_str(&self.etag).unwrap_or(HeaderValue::from_static("\"\""));
        let cache = HeaderValue::from_static(IMMUTABLE);
        if matches_etag(headers, &self.etag) {
            let mut response = http::Response::new(FileBody::empty());
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            response.headers_mut().insert(header::ETAG, tag);
            response.headers_mut().insert(header::CACHE_CONTROL, cache);
            return response;
        }
        let len = self.len;
        let mut response = http::Response::new(FileBody::new(self.file, len, permit));
        let h = response.headers_mut();
        h.insert(header::ETAG, tag);
        h.insert(header::CACHE_CONTROL, cache);
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        response
    }
}

/// Whether `If-None-Match` in `headers` names `tag` (or `*`).
pub fn matches_etag(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|candidate| candidate == tag || candidate == "*")
}

/// A piece being read on the blocking pool: the file back, and the piece.
type Reading = JoinHandle<io::Result<(File, Vec<u8>)>>;

/// A response body that reads a file [`PIECE`] bytes at a time on the blocking pool, each
/// read started only when the connection asks for the next frame (so a client that does not
/// read makes no reads and holds one piece at most). A file that ends before its length
/// (changed on disk) ends the body with an error, which cuts the answer short of its
/// `Content-Length`: the client sees a failed request and asks again.
#[derive(Debug)]
pub struct FileBody {
    file: Option<File>,
    left: u64,
    reading: Option<Reading>,
    permit: Option<OwnedSemaphorePermit>,
}

impl FileBody {
    /// The first `len` bytes of `file` from its position, holding `permit` until they are
    /// sent or the body is dropped.
    pub fn new(file: File, len: u64, permit: Option<OwnedSemaphorePermit>) -> Self {
        Self {
            file: Some(file),
            left: len,
            reading: None,
            permit,
        }
    }

    /// No bytes (a 304's body).
    pub fn empty() -> Self {
        Self {
            file: None,
            left: 0,
            reading: None,
            permit: None,
        }
    }
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            if let Some(reading) = &mut this.reading {
                let read = match Pin::new(reading).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(read) => read,
                };
                this.reading = None;
                return match read {
                    Ok(Ok((file, piece))) => {
                        this.left -= piece.len() as u64;
                        this.file = Some(file);
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from(piece)))))
                    }
                    Ok(Err(e)) => {
                        this.finish();
                        Poll::Ready(Some(Err(e)))
                    }
                    Err(e) => {
                        this.finish();
                        Poll::Ready(Some(Err(io::Error::other(e))))
                    }
                };
            }
            if this.left == 0 {
                this.finish();
                return Poll::Ready(None);
            }
            let Some(mut file) = this.file.take() else {
                return Poll::Ready(None);
            };
            let want = this.left.min(PIECE as u64) as usize;
            this.reading = Some(tokio::task::spawn_blocking(move || {
                let mut piece = vec![0u8; want];
                file.read_exact(&mut piece)?;
                Ok((file, piece))
            }));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0 && self.reading.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

impl FileBody {
    /// Done or failed: the file and the permit go at once, not when hyper drops the body.
    fn finish(&mut self) {
        self.file = None;
        self.left = 0;
        self.permit = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_file_is_sent_whole_in_pieces_and_its_permit_goes_with_the_body() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..(3 * PIECE + 17)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let open = OpenFile::open(&path, b"d").unwrap().unwrap();
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"d");
        hasher.update(&bytes);
        let tag = format!("\"{}\"", hex::encode(&hasher.finalize().as_bytes()[..16]));
        assert_eq!(open.etag(), tag);
        assert_eq!(open.len(), bytes.len() as u64);
        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        let permit = permits.clone().try_acquire_owned().unwrap();
        let response = open.respond(&HeaderMap::new(), "application/octet-stream", Some(permit));
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()[header::CONTENT_LENGTH],
            bytes.len().to_string()
        );
        assert_eq!(permits.available_permits(), 0, "held by the body");
        let body = response.into_body();
        let got = body.collect().await.unwrap().to_bytes();
        assert_eq!(got.as_ref(), bytes.as_slice());
        assert_eq!(permits.available_permits(), 1, "given back once sent");

        // The client holds it: 304, no body.
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&tag).unwrap());
        let open = OpenFile::open(&path, b"d").unwrap().unwrap();
        let response = open.respond(&headers, "application/octet-stream", None);
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        assert!(OpenFile::open(&dir.path().join("none"), b"d")
            .unwrap()
            .is_none());

        // A body dropped unsent gives its permit back.
        let permit = permits.clone().try_acquire_owned().unwrap();
        let open = OpenFile::open(&path, b"d").unwrap().unwrap();
        drop(open.respond(&HeaderMap::new(), "application/octet-stream", Some(permit)));
        assert_eq!(permits.available_permits(), 1);
    }
}
