//! Benchmark of the agent host (run by `scripts/bench-agent`; not a test, asserts nothing).
//!
//! `bench_agent calls <N>`: the overhead Airlock adds to one tool call. With the scripted
//! model answering at once, it times about N/20 turns of each kind through the real host
//! (Gate, audit log, store, sandbox, proxy):
//! - `text`:  the model answers with text only (one model round trip);
//! - `shell`: the model proposes 20 `shell` calls (`echo <i>-<j>`, each in its own
//!   sandbox) in one reply, then answers (two model round trips);
//! - `read`:  the same with 20 `read_file` calls;
//!
//! and N bare provider round trips (`rtt`). Per-call overhead of a turn = (turn time −
//! text turn p50 − round trip p50) / 20: what each call adds beyond the model. Its p50
//! and p99 are over turns, so they are percentiles of a 20-call mean, not of single calls.
//!
//! `bench_agent calls <N> [PREFIX...]`: the peers are timed the same way, so the ratios
//! compare like with like: a batch is the same 20 `echo`s run one after another, by
//! fork/exec of `/bin/sh` (`sh_batch`) and, when a PREFIX is given (the script passes a
//! bwrap command line), under it (`prefix_batch`); each batch yields its mean per run, and
//! p50/p99 are over batches. One batch of each peer runs right after each measured turn,
//! so a change in the machine's speed hits Airlock and its peers alike.
//!
//! Prints one `name p50_us p99_us` line per series.
//!
//! `bench_agent sessions <N>`: the host's resident memory with N idle sessions: one
//! process that loads N stored sessions (record, transcript, taint, budget) and holds for
//! each what the loop needs to continue it (the resumed state and the Gate built for its
//! workspace). Prints RSS (VmRSS from /proc/self/status) before and after, in KiB.
//!
//! `AIRLOCK_HOME` must name a scratch home.

use std::time::{Duration, Instant};

use airlock::agent_host::{AgentHost, HostOptions};
use airlock::home::Home;
use airlock::{config, policies, runtime};
use airlock_agent::provider::{connect, Message, ProviderKind};
use airlock_agent::scripted::{Reply, ScriptedModel, Step};
use airlock_store::{NewSession, SessionStore, Timestamp};

/// Tool calls the model proposes in one reply. Many calls per model round trip make the
/// round trip's jitter (tens of ms on loopback) small against what is measured.
const PER_TURN: usize = 20;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("calls");
    let n: usize = match args.get(2) {
        Some(s) => s
            .parse()
            .map_err(|_| anyhow::anyhow!("N must be a positive number, not `{s}`"))?,
        None => 200,
    };
    match mode {
        "calls" => calls(n, args.get(3..).unwrap_or_default()),
        "sessions" => sessions(n),
        other => anyhow::bail!(
            "unknown mode `{other}`\nhelp: bench_agent calls [N [PREFIX...]] | sessions [N]"
        ),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let (p50, p99) = (percentile(&v, 0.50), percentile(&v, 0.99));
    println!("{name} {} {}", p50.as_micros(), p99.as_micros());
    (p50, p99)
}

/// One peer batch: the same `PER_TURN` `echo`s as a shell turn, run one after another under
/// `prefix` (nothing: plain fork/exec of `/bin/sh`). Returns the mean time per run, so it
/// compares with a turn's per-call overhead, which is also a mean over `PER_TURN` calls.
fn peer_batch(prefix: &[String], i: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for j in 0..PER_TURN {
        let script = format!("echo {i}-{j}");
        let mut cmd = match prefix.split_first() {
            Some((program, rest)) => {
                let mut c = std::process::Command::new(program);
                c.args(rest).arg("/bin/sh");
                c
            }
            None => std::process::Command::new("/bin/sh"),
        };
        let status = cmd
            .args(["-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .status()?;
        if !status.success() {
            anyhow::bail!(
                "peer `{}` failed ({status})\nhelp: run it by hand to see why",
                prefix.first().map(String::as_str).unwrap_or("/bin/sh")
            );
        }
    }
    Ok(started.elapsed() / PER_TURN as u32)
}

fn calls(n: usize, prefix: &[String]) -> anyhow::Result<()> {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let model = server_rt.block_on(ScriptedModel::start(Vec::<Step>::new()))?;
    let provider_cfg = model.config(ProviderKind::Openai, true);

    // Bare round trips to the scripted model.
    let provider = connect(&provider_cfg)?;
    let mut rtt = Vec::with_capacity(n);
    for _ in 0..n {
        model.push([Step::text("ok")]);
        let req = provider_cfg.request("", vec![Message::User { text: "hi".into() }], vec![]);
        let mut sink = |_| {};
        let started = Instant::now();
        server_rt.block_on(provider.complete(&req, &mut sink))?;
        rtt.push(started.elapsed());
    }

    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    let mut host = AgentHost::open(
        home,
        cfg,
        &provider_cfg,
        HostOptions {
            session: None,
            approval_timeout: Some(1),
            profile: None,
            channel: "terminal".into(),
            messages_to: None,
            notices: airlock::service::caller::Notices::Stderr,
            workspace: None,
            egress: Default::default(),
            child: None,
            audit: None,
        },
    )?;
    for j in 0..PER_TURN {
        std::fs::write(
            host.workspace.join(format!("notes{j}.txt")),
            "alpha\nbeta\n",
        )?;
    }
    // One turn: the model proposes `calls` tool calls in one reply, then answers.
    let mut turn = |name: &str, calls: Vec<(&str, String)>| -> anyhow::Result<Duration> {
        let mut reply = Reply::default();
        for (j, (tool, args)) in calls.iter().enumerate() {
            reply = reply.with_tool_call(format!("{name}{j}"), *tool, args.clone());
        }
        if !calls.is_empty() {
            model.push([Step::Reply(reply)]);
        }
        model.push([Step::text("done")]);
        let started = Instant::now();
        let r = host.run_turn("go", None)?;
        let took = started.elapsed();
        if r.tool_calls.len() != calls.len() {
            anyhow::bail!(
                "{name}: {} of {} calls ran: {}",
                r.tool_calls.len(),
                calls.len(),
                r.outcome.summary()
            );
        }
        for c in &r.tool_calls {
            if !c.executed || c.is_error {
                anyhow::bail!("{name}: a call did not run cleanly: {}", c.result);
            }
        }
        Ok(took)
    };
    let shell_calls = |i: usize| -> Vec<(&str, String)> {
        (0..PER_TURN)
            .map(|j| ("shell", format!(r#"{{"command":"echo {i}-{j}"}}"#)))
            .collect()
    };
    let read_calls = || -> Vec<(&str, String)> {
        (0..PER_TURN)
            .map(|j| ("read_file", format!(r#"{{"path":"notes{j}.txt"}}"#)))
            .collect()
    };
    // Warm up the page cache and the sandbox helper binary.
    turn("w", shell_calls(0))?;
    let turns = n.div_ceil(PER_TURN).max(5);
    let mut text = Vec::new();
    let mut shell = Vec::new();
    let mut read = Vec::new();
    let mut sh_batch = Vec::new();
    let mut prefix_batch = Vec::new();
    peer_batch(&[], 0)?;
    if !prefix.is_empty() {
        peer_batch(prefix, 0)?;
    }
    for i in 0..turns {
        text.push(turn("t", vec![])?);
        shell.push(turn("s", shell_calls(i))?);
        read.push(turn("r", read_calls())?);
        sh_batch.push(peer_batch(&[], i)?);
        if !prefix.is_empty() {
            prefix_batch.push(peer_batch(prefix, i)?);
        }
    }
    host.close()?;

    let (rtt50, _) = report("rtt", rtt);
    let (text50, _) = report("text_turn", text);
    report("shell_turn", shell.clone());
    report("read_turn", read.clone());
    // A turn with calls has one more model round trip than a text-only turn.
    let base = text50 + rtt50;
    let per_call = |v: Vec<Duration>| -> Vec<Duration> {
        v.into_iter()
            .map(|d| d.saturating_sub(base) / PER_TURN as u32)
            .collect()
    };
    report("shell_overhead", per_call(shell));
    report("read_overhead", per_call(read));
    report("sh_batch", sh_batch);
    if !prefix.is_empty() {
        report("prefix_batch", prefix_batch);
    }
    Ok(())
}

fn vm_rss_kib() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/self/status"))
}

fn sessions(n: usize) -> anyhow::Result<()> {
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    let profile = policies::pick_profile(None, &cfg.policy.profile)?;
    let ids: Vec<String> = {
        let store = airlock::service::approvals::open_store(&home)?;
        (0..n)
            .map(|_| {
                let s = store.create_session(&NewSession::owner(), Timestamp::now())?;
                Ok(s.id().to_string())
            })
            .collect::<Result<_, airlock_store::StoreError>>()?
    };
    let before = vm_rss_kib()?;
    // One host process: one store, and per session its resumed state and its Gate.
    let store = airlock::service::approvals::open_store(&home)?;
    let mut held = Vec::with_capacity(n);
    for id in &ids {
        let resumed = store.resume_session(id, Timestamp::now())?;
        let gate = runtime::gate_for(&home, &cfg, profile, &resumed.record.workspace)?;
        held.push((resumed, gate));
    }
    let after = vm_rss_kib()?;
    println!("rss_before_kib {before}");
    println!("rss_after_kib {after}");
    println!("sessions {}", held.len());
    Ok(())
}
