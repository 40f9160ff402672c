//! Smart HTTP for the loopback upstream: requests under a mount point are handed to the
//! real `git http-backend` as CGI, so the sandbox's git speaks the protocol real git hosts
//! speak (a GET of `info/refs?service=...`, then a POST of `git-upload-pack` or
//! `git-receive-pack`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// One request as the upstream parsed it.
pub struct CgiRequest<'a> {
    pub method: &'a str,
    /// The path below the mount point (`/repo.git/info/refs`).
    pub path_info: &'a str,
    pub query: &'a str,
    /// Header names in lower case.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// What `git http-backend` answered.
pub struct CgiResponse {
    pub status: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Run `git http-backend` for `req` on the repositories below `root`. Pushes are allowed
/// (as an anonymous user), so only a policy in front of it can refuse one.
pub fn git_http_backend(root: &Path, req: &CgiRequest) -> std::io::Result<CgiResponse> {
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    let mut child = Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_COUNT", "2")
        .env("GIT_CONFIG_KEY_0", "http.receivepack")
        .env("GIT_CONFIG_VALUE_0", "true")
        .env("GIT_CONFIG_KEY_1", "safe.directory")
        .env("GIT_CONFIG_VALUE_1", "*")
        .env("REMOTE_USER", "anonymous")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REQUEST_METHOD", req.method)
        .env("PATH_INFO", req.path_info)
        .env("QUERY_STRING", req.query)
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", req.body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let body = req.body.to_vec();
    // Write the body from another thread: the backend may answer before reading it all.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let out = child.wait_with_output()?;
    let _ = writer.join();
    parse_cgi(&out.stdout)
}

/// Split CGI output into its `Status`, other headers and body.
fn parse_cgi(out: &[u8]) -> std::io::Result<CgiResponse> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let (head_len, sep) = match out.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => (i, 4),
        None => (
            out.windows(2)
                .position(|w| w == b"\n\n")
                .ok_or_else(|| bad("git http-backend printed no header block"))?,
            2,
        ),
    };
    let head = String::from_utf8_lossy(&out[..head_len]);
    let mut status = "200 OK".to_string();
    let mut headers = Vec::new();
    for line in head.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        if k.eq_ignore_ascii_case("status") {
            status = v.trim().to_string();
        } else {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    Ok(CgiResponse {
        status,
        headers,
        body: out[head_len + sep..].to_vec(),
    })
}
