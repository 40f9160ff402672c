#!/usr/bin/env python3
"""Generate benches/corpus/commands.txt: realistic developer and agent shell commands.

Templates of everyday commands are combined with realistic arguments; the output is
deterministic (fixed seed), deduplicated and one command per line (newlines as `\\n`).
Usage: python3 scripts/gen-command-corpus.py > benches/corpus/commands.txt
"""
import itertools
import random

random.seed(20240501)

FILES = ["src/main.rs", "src/lib.rs", "Cargo.toml", "README.md", "package.json", "setup.py",
         "app/models.py", "tests/test_api.py", "docs/index.md", "Makefile", ".github/workflows/ci.yml",
         "config/settings.yaml", "index.js", "src/App.tsx", "go.mod", "cmd/server/main.go",
         "Dockerfile", "requirements.txt", "pyproject.toml", "/etc/hosts", "/var/log/syslog"]
DIRS = ["src", "tests", "docs", "crates", "app", "lib", "build", "dist", "node_modules", ".", "..",
        "scripts", "/tmp", "target/debug", "~/projects/api", "$HOME/.config"]
PATTERNS = ["TODO", "FIXME", "unsafe", "fn main", "import requests", "console.log", "panic!",
            "def test_", "TODO\\|FIXME", "error", "password", "version", "use std::", "async fn"]
BRANCHES = ["main", "master", "develop", "feature/login", "fix/issue-42", "release/1.2", "HEAD~1", "origin/main"]
PKGS_NPM = ["react", "typescript", "eslint", "lodash", "express", "jest", "vite", "@types/node", "prettier", "zod"]
PKGS_PY = ["requests", "numpy", "pandas", "pytest", "flask", "django", "black", "ruff", "mypy", "httpx"]
CRATES = ["serde", "tokio", "anyhow", "clap", "regex", "thiserror", "tracing", "rand", "reqwest", "itertools"]
IMAGES = ["ubuntu:22.04", "python:3.12-slim", "node:20", "postgres:16", "redis:7", "nginx:alpine", "rust:1.80"]
URLS = ["https://api.github.com/repos/rust-lang/rust", "http://localhost:8080/health", "https://example.com/file.tar.gz",
        "http://127.0.0.1:3000/api/users", "https://pypi.org/simple/requests/", "https://registry.npmjs.org/react"]
SERVICES = ["nginx", "docker", "postgresql", "redis-server", "ssh", "cron", "systemd-journald"]
PODS = ["web-7d9f8b6c5-x2k4p", "api-0", "worker-5f6d7c8b9-abcde", "db-0"]
NAMESPACES = ["default", "kube-system", "staging", "production"]

templates = {
    "git": [
        "git status", "git status -sb", "git diff", "git diff --stat", "git diff --cached {f}",
        "git log --oneline -n {n}", "git log --graph --oneline --all", "git log -p -- {f}",
        "git show {b}", "git show HEAD:{f}", "git branch -a", "git checkout {b}", "git checkout -b {b}",
        "git switch {b}", "git pull --rebase origin {b}", "git fetch --all --prune", "git add {f}",
        "git add -A", "git commit -m \"Fix {p} handling\"", "git commit --amend --no-edit",
        "git push origin {b}", "git push -u origin HEAD", "git stash", "git stash pop", "git rebase -i HEAD~{n}",
        "git blame -L 10,40 {f}", "git grep -n \"{p}\"", "git rev-parse --show-toplevel",
        "git ls-files | wc -l", "git clean -fdx", "git reset --hard {b}", "git cherry-pick {b}",
        "git tag -a v1.{n}.0 -m \"release\"", "git remote -v", "git log --since=\"2 weeks ago\" --author=\"$(git config user.email)\" --oneline",
        "git diff --name-only {b}...HEAD | grep '\\.rs$'", "git -C {d} status --short",
    ],
    "cargo": [
        "cargo build", "cargo build --release", "cargo test", "cargo test -p airlock-core -- --nocapture",
        "cargo test {p2}", "cargo clippy --all-targets -- -D warnings", "cargo fmt --all -- --check",
        "cargo run -- --help", "cargo add {c}", "cargo tree -d", "cargo update -p {c}",
        "cargo doc --no-deps --open", "cargo bench --bench decision", "cargo check --workspace",
        "RUST_LOG=debug cargo run --bin server", "RUST_BACKTRACE=1 cargo test {p2} 2>&1 | tail -n {n}",
        "cargo metadata --format-version 1 | jq '.packages[].name'",
    ],
    "npm": [
        "npm install", "npm ci", "npm install {np}", "npm install -D {np}", "npm run build", "npm run test -- --watch=false",
        "npm test", "npm run lint -- --fix", "npx tsc --noEmit", "npx prettier --write \"src/**/*.ts\"",
        "npm ls {np}", "npm outdated", "yarn add {np}", "pnpm install --frozen-lockfile", "node {f}",
        "node -e 'console.log(process.version)'", "npx jest {f}", "npm view {np} version",
    ],
    "python": [
        "pip install {pp}", "pip install -r requirements.txt", "pip install -e .", "pip list --outdated",
        "pip show {pp}", "python -m venv .venv", "source .venv/bin/activate", "python3 -m pytest -q",
        "pytest -x -k \"{p2}\"", "pytest tests/ -v --tb=short", "python manage.py migrate",
        "python3 -c 'import sys; print(sys.version)'", "black {d}", "ruff check {d} --fix", "mypy {d}",
        "python3 {f2}", "uv pip install {pp}", "poetry add {pp}", "python -m http.server 8000",
    ],
    "docker": [
        "docker ps -a", "docker images", "docker build -t app:{n} .", "docker run --rm -it {img} bash",
        "docker run -d -p 8080:80 --name web {img}", "docker logs -f --tail {n} web", "docker exec -it web sh",
        "docker compose up -d", "docker compose down -v", "docker compose logs -f api", "docker pull {img}",
        "docker system prune -af", "docker inspect web | jq '.[0].NetworkSettings'", "docker stop $(docker ps -q)",
    ],
    "k8s": [
        "kubectl get pods -n {ns}", "kubectl get pods -A -o wide", "kubectl describe pod {pod} -n {ns}",
        "kubectl logs -f {pod} -n {ns}", "kubectl logs {pod} --previous", "kubectl apply -f k8s/deployment.yaml",
        "kubectl delete pod {pod} -n {ns}", "kubectl rollout status deployment/api -n {ns}",
        "kubectl get svc -n {ns}", "kubectl port-forward svc/api 8080:80 -n {ns}",
        "kubectl exec -it {pod} -n {ns} -- /bin/sh", "kubectl config use-context {ns}",
        "kubectl get events --sort-by=.metadata.creationTimestamp -n {ns}", "helm upgrade --install api ./chart -n {ns}",
    ],
    "find": [
        "find {d} -name \"*.rs\"", "find {d} -type f -name '*.py' | xargs grep -l \"{p}\"",
        "find {d} -type f -mtime -{n}", "find {d} -name '*.log' -delete", "find {d} -type d -name __pycache__ -exec rm -rf {{}} +",
        "find {d} -size +{n}M -ls", "find {d} -name '*.orig' -exec rm {{}} \\;", "find {d} -maxdepth 2 -type f | wc -l",
        "find {d} -newer {f} -print", "find {d} -type f -print0 | xargs -0 sed -i 's/foo/bar/g'",
    ],
    "grep": [
        "grep -rn \"{p}\" {d}", "grep -ri \"{p}\" --include=\"*.py\" {d}", "grep -c \"{p}\" {f}",
        "grep -v '^#' {f} | grep -v '^$'", "grep -E \"{p}|{p3}\" -r {d} | head -n {n}", "rg \"{p}\" {d}",
        "rg -n --hidden -g '!.git' \"{p}\"", "grep -o 'http[s]*://[^\"]*' {f} | sort -u", "zgrep -i error /var/log/syslog.1.gz",
        "ag \"{p}\" {d}", "grep -l \"{p}\" $(git ls-files)",
    ],
    "text": [
        "cat {f}", "cat {f} | head -n {n}", "head -n {n} {f}", "tail -n {n} {f}", "tail -f /var/log/syslog",
        "wc -l {f}", "sort {f} | uniq -c | sort -rn | head", "cut -d: -f1 /etc/passwd", "awk '{{print $1}}' {f}",
        "awk -F, 'NR>1 {{sum+=$3}} END {{print sum}}' data.csv", "sed -n '{n},+10p' {f}", "sed -i 's/{p3}/{p4}/g' {f}",
        "sed -e 's/^[ \\t]*//' {f} > {f}.clean", "tr -d '\\r' < {f} > {f}.unix", "diff -u {f} {f}.bak",
        "jq '.dependencies' package.json", "jq -r '.items[] | .metadata.name' pods.json", "less {f}",
        "column -t -s, data.csv | less -S", "nl -ba {f} | sed -n '{n},$p'", "xxd {f} | head", "md5sum {f}",
        "sha256sum dist/*.tar.gz", "echo \"$PATH\" | tr ':' '\\n'", "printf '%s\\n' \"${{arr[@]}}\"",
    ],
    "files": [
        "ls", "ls -la", "ls -lah {d}", "ls -1 {d} | wc -l", "ls -lt | head", "tree -L 2 {d}", "du -sh {d}",
        "du -sh * | sort -h", "df -h", "mkdir -p {d}/new", "cp {f} {f}.bak", "cp -r {d} /tmp/backup",
        "mv {f} {d}/", "rm -rf build/ dist/", "rm {f}.bak", "touch {d}/.gitkeep", "chmod +x scripts/*.sh",
        "chmod 644 {f}", "ln -s ../shared {d}/shared", "stat {f}", "file {f}", "realpath {f}", "pwd",
        "cd {d} && ls", "cd {d} && git status", "readlink -f {f}", "basename $(pwd)",
    ],
    "net": [
        "curl -s {u}", "curl -sSL {u} | jq .", "curl -I {u}", "curl -o /tmp/out {u}", "curl -X POST -H 'Content-Type: application/json' -d '{{\"name\":\"x\"}}' {u}",
        "curl -fsSL {u} | tar -xz -C /tmp", "wget -q {u}", "wget -O - {u} | head", "ping -c 3 127.0.0.1",
        "ss -tlnp", "netstat -tulpn | grep LISTEN", "lsof -i :{port}", "dig +short localhost", "nc -zv 127.0.0.1 {port}",
        "ssh deploy@build.example.com 'uptime'", "scp {f} deploy@build.example.com:/tmp/", "rsync -avz --delete {d}/ backup:/srv/{d}/",
    ],
    "archive": [
        "tar -czf backup.tar.gz {d}", "tar -xzf archive.tar.gz", "tar -xvf release.tar -C /tmp", "tar -tzf archive.tar.gz | head",
        "zip -r out.zip {d}", "unzip -l out.zip", "unzip -o out.zip -d /tmp/out", "gzip -9 {f}", "gunzip -c {f}.gz | less",
        "xz -d archive.tar.xz", "7z x archive.7z",
    ],
    "sys": [
        "ps aux | grep {svc}", "ps -ef --sort=-%mem | head", "top -b -n 1 | head -n 20", "htop", "kill -9 $(pgrep -f {svc})",
        "pkill -f 'node server.js'", "systemctl status {svc}", "sudo systemctl restart {svc}", "journalctl -u {svc} -n {n} --no-pager",
        "journalctl -f -u {svc}", "free -h", "uptime", "uname -a", "whoami", "id", "env | sort", "echo $SHELL",
        "which python3", "command -v node", "type ls", "nproc", "lscpu | head", "date -u +%Y-%m-%dT%H:%M:%SZ",
        "sudo apt-get update && sudo apt-get install -y {apt}", "apt-cache policy {apt}", "dpkg -l | grep {apt}",
        "crontab -l", "export PATH=\"$HOME/.local/bin:$PATH\"", "export RUST_LOG=info", "source ~/.bashrc", "history | tail -n {n}",
        "time make -j$(nproc)", "timeout 30 ./scripts/wait-for-db.sh", "nohup ./server > server.log 2>&1 &", "watch -n 2 'kubectl get pods'",
    ],
    "make": [
        "make", "make -j4", "make test", "make clean && make", "make install PREFIX=$HOME/.local", "./configure --prefix=/usr/local",
        "cmake -S . -B build -DCMAKE_BUILD_TYPE=Release", "cmake --build build -j 4", "ninja -C build", "go build ./...",
        "go test ./... -run {p2}", "go mod tidy", "go vet ./...", "go run ./cmd/server", "gofmt -l .", "./gradlew build",
        "mvn -q package -DskipTests", "bundle exec rspec", "rake db:migrate", "mix test",
    ],
    "loops": [
        "for f in *.md; do wc -w \"$f\"; done", "for i in $(seq 1 {n}); do curl -s {u} > /dev/null; done",
        "while read -r line; do echo \"$line\"; done < {f}", "if [ -f {f} ]; then cat {f}; fi",
        "[ -d {d} ] || mkdir -p {d}", "test -f .env && source .env", "for pod in $(kubectl get pods -o name); do kubectl logs $pod | tail -n 1; done",
        "ls *.txt | while read f; do mv \"$f\" \"${{f%.txt}}.md\"; done", "cat <<'EOF' > {f}.tmp\\nhello\\nEOF",
        "python3 - <<'EOF'\\nprint(1)\\nEOF", "diff <(sort a.txt) <(sort b.txt)", "tee -a build.log < /dev/null",
        "echo \"$(date): deploy\" >> deploy.log", "X=$(git rev-parse --short HEAD) && echo $X", "bash -c 'cd {d} && make test'",
        "sh -c \"echo $HOME\"", "env NODE_ENV=production node server.js", "sudo -u postgres psql -c 'SELECT 1'",
        "xargs -n 1 -P 4 curl -sO < urls.txt", "seq {n} | xargs -I{{}} echo item-{{}}", "yes | head -n {n}",
    ],
}

values = {
    "f": FILES, "f2": ["scripts/migrate.py", "manage.py", "tools/gen.py", "app.py", "bench.py"],
    "d": DIRS, "p": PATTERNS, "p2": ["test_login", "parse", "decision", "roundtrip", "api::", "shell"],
    "p3": ["foo", "localhost", "v1", "http://", "old_name"], "p4": ["bar", "127.0.0.1", "v2", "https://", "new_name"],
    "b": BRANCHES, "n": ["1", "3", "5", "10", "20", "50", "100", "200"], "np": PKGS_NPM, "pp": PKGS_PY, "c": CRATES,
    "img": IMAGES, "u": URLS, "svc": SERVICES, "pod": PODS, "ns": NAMESPACES, "port": ["80", "443", "3000", "5432", "8080"],
    "apt": ["jq", "ripgrep", "build-essential", "libssl-dev", "curl", "tmux", "htop"],
}


def fill(template):
    out = template
    for key, options in values.items():
        token = "{" + key + "}"
        while token in out:
            out = out.replace(token, random.choice(options), 1)
    return out.replace("{{", "{").replace("}}", "}")


seen = []
seen_set = set()
pool = list(itertools.chain.from_iterable(templates.values()))
attempts = 0
while len(seen) < 1400 and attempts < 100000:
    attempts += 1
    cmd = fill(random.choice(pool))
    suffix = random.random()
    if suffix < 0.06:
        cmd += " 2>&1 | tee -a log.txt"
    elif suffix < 0.10:
        cmd += " > /dev/null 2>&1"
    elif suffix < 0.13:
        cmd += " && echo done"
    elif suffix < 0.15:
        cmd = "time " + cmd
    if cmd not in seen_set:
        seen_set.add(cmd)
        seen.append(cmd)

print("\n".join(seen))
