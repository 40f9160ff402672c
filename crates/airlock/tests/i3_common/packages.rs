//! What the package clients in the sandbox fetch, built on the host with the real tools and
//! served by a loopback [`Upstream`]: a git repository for dumb HTTP, a wheel behind a PEP
//! 503 simple index, an npm package document with its tarball, and a sparse cargo registry
//! with one crate.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::Upstream;

/// Run `cmd` on the host; panic with its output if it fails.
pub fn host(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.test"])
        .args(["-c", "init.defaultBranch=main", "-c", "safe.directory=*"]);
    c
}

/// A bare repository `<dir>/repo.git` holding one commit with `file` = `content` on
/// `main`, made by pushing from a clone on the host. Returns its path.
pub fn make_git_repo(dir: &Path, file: &str, content: &str) -> PathBuf {
    let bare = dir.join("repo.git");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    host(git(dir).args(["init", "-q", "--bare"]).arg(&bare));
    host(git(&src).args(["init", "-q"]));
    std::fs::write(src.join(file), content).unwrap();
    host(git(&src).args(["add", file]));
    host(git(&src).args(["commit", "-q", "-m", "first"]));
    host(git(&src).arg("push").arg("-q").arg(&bare).arg("main"));
    bare
}

/// [`make_git_repo`], prepared for dumb HTTP (`git update-server-info`) and served as
/// static files under `prefix` (`/repo.git`).
pub fn serve_git_repo(up: &Upstream, work: &Path, prefix: &str, file: &str, content: &str) {
    let bare = make_git_repo(&work.join("dumb"), file, content);
    host(git(&bare).args(["update-server-info"]));
    up.add_dir(prefix, &bare);
}

/// [`make_git_repo`] served by `git http-backend` (smart HTTP) as `<mount>/repo.git`.
/// Returns the bare repository's path.
pub fn serve_smart_git_repo(
    up: &Upstream,
    work: &Path,
    mount: &str,
    file: &str,
    content: &str,
) -> PathBuf {
    let root = work.join("smart");
    let bare = make_git_repo(&root, file, content);
    up.add_git_http_backend(mount, &root);
    bare
}

/// A pure-Python wheel `<name>-<version>-py3-none-any.whl` (METADATA, WHEEL, RECORD and a
/// module), zipped by Python's `zipfile` on the host. Returns the file name and bytes.
pub fn build_wheel(work: &Path, name: &str, version: &str) -> (String, Vec<u8>) {
    let file = format!("{name}-{version}-py3-none-any.whl");
    let script = r#"
import base64, hashlib, sys, zipfile
path, name, version = sys.argv[1:4]
dist = f"{name}-{version}.dist-info"
files = {
    f"{name}.py": "VALUE = 'from the test index'\n",
    f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for p, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{p},sha256={digest},{len(text.encode())}")
record.append(f"{dist}/RECORD,,")
files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
with zipfile.ZipFile(path, "w") as z:
    for p, text in files.items():
        z.writestr(p, text)
"#;
    let path = work.join(&file);
    host(
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&path)
            .arg(name)
            .arg(version),
    );
    (file, std::fs::read(&path).unwrap())
}

/// Serve `wheel` from a PEP 503 simple index under `/simple/`: the project page links the
/// file (with its sha256, which pip checks) and the file sits under `/files/`.
pub fn serve_simple_index(up: &Upstream, host_name: &str, project: &str, file: &str, bytes: &[u8]) {
    let sha = sha256_hex(bytes);
    let url = format!("https://{host_name}:{}/files/{file}", up.port);
    let page = format!(
        "<!DOCTYPE html>\n<html><body>\n<a href=\"{url}#sha256={sha}\">{file}</a>\n</body></html>\n"
    );
    up.add_typed_file(&format!("/simple/{project}/"), "text/html", page);
    up.add_file(&format!("/files/{file}"), bytes.to_vec());
}

/// An npm package `<name>@<version>` packed by `npm pack` on the host and served as a
/// registry would: the package document at `/<name>` (JSON) and the tarball under
/// `/<name>/-/`. Returns the tarball's bytes.
pub fn serve_npm_package(
    up: &Upstream,
    work: &Path,
    host_name: &str,
    name: &str,
    version: &str,
) -> Vec<u8> {
    let src = work.join("npm-src");
    std::fs::create_dir_all(&src).unwrap();
    let manifest = serde_json::json!({
        "name": name, "version": version, "main": "index.js", "license": "MIT",
        "description": "served by the test registry",
    });
    std::fs::write(src.join("package.json"), manifest.to_string()).unwrap();
    std::fs::write(
        src.join("index.js"),
        "module.exports = 'from the test registry';\n",
    )
    .unwrap();
    let packed = host(
        Command::new("npm")
            .current_dir(&src)
            .env("HOME", work)
            .env("npm_config_cache", work.join("npm-cache"))
            .args(["pack", "--json", "--silent", "--pack-destination"])
            .arg(work),
    );
    let info: serde_json::Value = serde_json::from_str(&packed)
        .unwrap_or_else(|e| panic!("npm pack --json printed {packed:?}: {e}"));
    let file = info[0]["filename"].as_str().unwrap().to_string();
    let tgz = std::fs::read(work.join(&file)).unwrap();
    let tarball = format!(
        "https://{host_name}:{}/{name}/-/{name}-{version}.tgz",
        up.port
    );
    let mut version_doc = manifest.clone();
    version_doc["dist"] = serde_json::json!({
        "tarball": tarball,
        "shasum": info[0]["shasum"],
        "integrity": info[0]["integrity"],
    });
    let doc = serde_json::json!({
        "name": name,
        "dist-tags": { "latest": version },
        "versions": { version: version_doc },
    });
    up.add_typed_file(&format!("/{name}"), "application/json", doc.to_string());
    up.add_file(&format!("/{name}/-/{name}-{version}.tgz"), tgz.clone());
    tgz
}

/// A sparse cargo registry under `/index/` with one crate `<name>-<version>` (a gzip'd tar
/// of `Cargo.toml` and `src/lib.rs`, made by `tar` on the host) downloadable under `/dl/`.
/// Returns the `.crate` file's bytes.
pub fn serve_sparse_registry(
    up: &Upstream,
    work: &Path,
    host_name: &str,
    name: &str,
    version: &str,
) -> Vec<u8> {
    let src = work.join("crate-src");
    let pkg = src.join(format!("{name}-{version}"));
    std::fs::create_dir_all(pkg.join("src")).unwrap();
    std::fs::write(
        pkg.join("Cargo.toml"),
        format!("[package]\nname = \"{name}\"\nversion = \"{version}\"\nedition = \"2021\"\n"),
    )
    .unwrap();
    std::fs::write(
        pkg.join("src/lib.rs"),
        "pub const FROM: &str = \"the test registry\";\n",
    )
    .unwrap();
    let file = work.join(format!("{name}-{version}.crate"));
    host(
        Command::new("tar")
            .arg("-czf")
            .arg(&file)
            .arg("-C")
            .arg(&src)
            .arg(format!("{name}-{version}")),
    );
    let bytes = std::fs::read(&file).unwrap();
    let index = work.join("index");
    std::fs::create_dir_all(index.join(index_dir(name))).unwrap();
    let config = serde_json::json!({
        "dl": format!("https://{host_name}:{}/dl/{{crate}}/{{version}}/download", up.port),
    });
    std::fs::write(index.join("config.json"), config.to_string()).unwrap();
    let entry = serde_json::json!({
        "name": name, "vers": version, "deps": [], "features": {},
        "cksum": sha256_hex(&bytes), "yanked": false,
    });
    std::fs::write(index.join(index_dir(name)).join(name), format!("{entry}\n")).unwrap();
    up.add_dir("/index", &index);
    up.add_file(&format!("/dl/{name}/{version}/download"), bytes.clone());
    bytes
}

/// The index directory of a crate name of four or more characters (`ab/cd`).
fn index_dir(name: &str) -> String {
    assert!(name.len() >= 4, "index_dir handles names of 4+ characters");
    format!("{}/{}", &name[..2], &name[2..4])
}

/// The sha256 of `bytes` in lower-case hex, by `sha256sum` on the host.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum (coreutils)");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}
