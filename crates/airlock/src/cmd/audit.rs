//! `airlock audit verify|export|tail|rotate-key`.

use airlock_audit::{AuditError, CheckpointSigner, KeyRotation, Trust};

use crate::config;
use crate::home::Home;
use crate::runtime;

pub fn verify() -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    print_report(&crate::service::audit::verify(&home)?)
}

/// `airlock audit verify --export FILE`: rebuild the log from an export, in a private
/// temporary directory, and verify it exactly as the log itself against this home's public
/// key. The high-water mark is the machine's own and is not checked here.
pub fn verify_export(file: &std::path::Path) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let key_path = airlock_audit::public_key_path(&home.audit_key());
    let key = airlock_audit::load_verifier(&key_path).map_err(|e| {
        anyhow::anyhow!(
            "{e}\nhelp: verify on a machine whose config dir holds the log's public key ({})",
            key_path.display()
        )
    })?;
    let text = std::fs::read_to_string(file).map_err(|e| {
        anyhow::anyhow!(
            "{}: {e}\nhelp: give the file `airlock audit export --output` wrote",
            file.display()
        )
    })?;
    let dir = tempfile::tempdir()?;
    crate::audit_export::rebuild_audit_dir(&text, dir.path())
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", file.display()))?;
    let trust = Trust {
        key: &key,
        mark: None,
    };
    let report =
        airlock_audit::verify_with(dir.path(), &trust).map_err(|e| anyhow::anyhow!("{e}"))?;
    crate::out!("export {}:", file.display());
    print_report(&report)
}

/// `airlock audit export`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[arg(long, value_enum)]
    pub format: crate::audit_export::Format,
    /// Write to this file (created private to the operator) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Send the OTLP/JSON to the collector at `[audit] otlp_endpoint` (or --endpoint).
    #[arg(long)]
    pub post: bool,
    /// The collector to send to, instead of `[audit] otlp_endpoint`.
    #[arg(long, value_name = "URL", requires = "post")]
    pub endpoint: Option<String>,
}

pub fn export(args: ExportArgs) -> anyhow::Result<i32> {
    use crate::audit_export::{self, Format};
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    if args.post && args.format != Format::Otlp {
        anyhow::bail!("--post sends OTLP/JSON only\nhelp: add --format otlp");
    }
    // The collector first: a refusal should not wait on reading the whole log.
    let endpoint = match args.post {
        false => None,
        true => Some(args.endpoint.or(cfg.audit.otlp_endpoint).ok_or_else(|| {
            anyhow::anyhow!("no collector to send to\nhelp: set otlp_endpoint under [audit] in airlock.toml, or give --endpoint URL")
        })?),
    };
    let entries = audit_export::read_audit_dir(&home.audit_dir())?;
    let text = match args.format {
        Format::Jsonl => audit_export::to_jsonl(&entries),
        Format::Otlp => {
            // The kernel's hostname; nix's `hostname` feature is not enabled for one read.
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default();
            serde_json::to_string(&audit_export::to_otlp(&entries, &host))?
        }
    };
    let records = entries
        .iter()
        .filter(|e| e.kind == audit_export::EntryKind::Record)
        .count();
    let checkpoints = entries.len() - records;
    if let Some(endpoint) = endpoint {
        let target = audit_export::post_otlp(&endpoint, &text)?;
        eprintln!("sent {records} records and {checkpoints} checkpoints to {target}");
    }
    if let Some(path) = &args.output {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| {
                anyhow::anyhow!(
                    "{}: {e}\nhelp: give a path in a directory you can write",
                    path.display()
                )
            })?;
        f.write_all(text.as_bytes())?;
        if !text.ends_with('\n') {
            f.write_all(b"\n")?;
        }
        f.sync_all()?;
        eprintln!(
            "wrote {records} records and {checkpoints} checkpoints to {}; check a copy with `airlock audit verify --export FILE`",
            path.display()
        );
    } else if !args.post {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        if !text.ends_with('\n') {
            out.write_all(b"\n")?;
        }
    }
    Ok(0)
}

/// Print what verification found; exit status 0 when the log is sound.
fn print_report(report: &airlock_audit::VerifyReport) -> anyhow::Result<i32> {
    for change in &report.key_changes {
        let old = change.old_key_id.as_deref().unwrap_or("(unknown)");
        if change.signed_by_old_key {
            crate::out!(
                "key change at record #{} (line {}): key {old} signed the hand-over to key {}",
                change.seq,
                change.line,
                change.new_key_id
            );
        } else {
            crate::out!(
                "warning: key change at record #{} (line {}) from key {old} to key {} was NOT signed by the old key (it was lost): records after the last checkpoint of key {old} are vouched for only by the new key{}",
                change.seq,
                change.line,
                change.new_key_id,
                match change.unchecked_checkpoints {
                    0 => String::new(),
                    n => format!(", and {n} earlier checkpoints could not be checked (the old public key is unknown)"),
                }
            );
        }
    }
    for t in &report.time_regressions {
        crate::out!(
            "warning: time goes backwards: record #{} (line {}) at {} follows record #{} at {}",
            t.seq,
            t.line,
            t.time,
            t.previous_seq,
            t.previous_time
        );
    }
    let unlisted = report.time_regressions_total - report.time_regressions.len() as u64;
    if unlisted > 0 {
        crate::out!("warning: {unlisted} more records go backwards in time");
    }
    if report.time_regressions_total > 0 {
        crate::out!("help: a clock set back explains this; otherwise records were written under a false clock");
    }
    match &report.problem {
        None => {
            crate::out!(
                "audit log OK: {} records, {} signed checkpoints (last covers seq {}), {} unsigned tail records, high-water mark at seq {}",
                report.records,
                report.checkpoints,
                report.last_checkpoint_seq.map_or("-".into(), |s| s.to_string()),
                report.unsigned_tail,
                report.mark_seq.map_or("-".into(), |s| s.to_string()),
            );
            if report.unsigned_tail > 0 {
                crate::out!(
                    "warning: {} records after the last signed checkpoint: expected after a crash, but a removed final checkpoint looks the same\nhelp: a cleanly closed log has none; compare with your last known checkpoint",
                    report.unsigned_tail
                );
            }
            Ok(0)
        }
        Some(p) => {
            eprintln!("audit log FAILED verification: {p}");
            Ok(1)
        }
    }
}

pub fn tail(n: usize, as_json: bool) -> anyhow::Result<i32> {
    use crate::service::audit::{TailInput, TailLine};
    use airlock_core::terminal_text::escape_json_text;

    let home = Home::from_env()?;
    let input = TailInput { n };
    let mut unreadable = 0usize;
    let print = |line: TailLine| -> anyhow::Result<()> {
        match line {
            TailLine::Record(v) if as_json => crate::out!("{}", escape_json_text(&v.to_string())),
            TailLine::Record(v) => crate::out!("{}", airlock_audit::format_record_line(&v)),
            TailLine::Unreadable {
                offset,
                bytes,
                reason,
            } => {
                unreadable += 1;
                if as_json {
                    crate::out!(
                        "{}",
                        serde_json::json!({"unreadable": {"offset": offset, "bytes": bytes, "reason": reason}})
                    );
                } else {
                    crate::out!("#? [line at byte {offset}, {bytes} bytes, not shown: {reason}]");
                }
            }
            // The host's tail ended early; what it said is the error.
            TailLine::Error(e) => anyhow::bail!("{e}"),
        }
        Ok(())
    };
    // Either way prints through the one `print` (only one of them runs at a time).
    let print = std::cell::RefCell::new(print);
    crate::host::client::through_host_or(
        &home,
        |host| {
            host.post_lines("/v1/audit/tail", &input, |line| {
                let line: TailLine = serde_json::from_str(line).map_err(|e| {
                    anyhow::anyhow!(
                        "the host's tail sent a line this client does not understand: {e}"
                    )
                })?;
                (print.borrow_mut())(line)
            })
        },
        || crate::service::audit::tail(&home, &input, |line| (print.borrow_mut())(line)),
    )?;
    if unreadable > 0 {
        eprintln!(
            "airlock: {unreadable} of the last lines of the audit log are not records\nhelp: run `airlock audit verify` to check the log"
        );
        return Ok(1);
    }
    Ok(0)
}

/// A rotation that recorded its hand-over in the log but died before the new key took the
/// old one's place: finish it, if the log really hands over to the key waiting at
/// `next_path`. Returns whether it did.
fn finish_interrupted_rotation(
    home: &Home,
    key_path: &std::path::Path,
    next_path: &std::path::Path,
) -> anyhow::Result<bool> {
    let Ok(next) = CheckpointSigner::load(next_path) else {
        return Ok(false);
    };
    let key = next.verifying_key();
    let mark = home.audit_mark();
    let trust = Trust {
        key: &key,
        mark: Some(&mark),
    };
    let Ok(report) = airlock_audit::verify_with(&home.audit_dir(), &trust) else {
        return Ok(false);
    };
    let handed_over = report
        .key_changes
        .last()
        .is_some_and(|c| c.new_key_id == next.key_id());
    if !report.is_ok() || !handed_over {
        return Ok(false);
    }
    install_key(key_path, next_path)?;
    crate::out!(
        "finished an interrupted key rotation: the log hands over to key {}, which now signs",
        next.key_id()
    );
    Ok(true)
}

/// Put the new secret key in place of the old one, and its public key beside it.
fn install_key(key_path: &std::path::Path, next_path: &std::path::Path) -> anyhow::Result<()> {
    std::fs::rename(next_path, key_path)?;
    let _ = std::fs::remove_file(airlock_audit::public_key_path(key_path));
    // Loading writes the new public key beside the secret one.
    CheckpointSigner::load(key_path).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(dir) = key_path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Replace the checkpoint signing key. Order matters for a crash at any point: the new key
/// is written beside the old one first, the log records the hand-over, and only then does
/// the new key take the old one's place.
pub fn rotate_key() -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    let key_path = home.audit_key();
    let next_path = {
        let mut name = key_path.as_os_str().to_owned();
        name.push(".next");
        std::path::PathBuf::from(name)
    };
    if std::fs::symlink_metadata(&next_path).is_ok() {
        if finish_interrupted_rotation(&home, &key_path, &next_path)? {
            return Ok(0);
        }
        anyhow::bail!(
            "{} exists: an earlier `airlock audit rotate-key` did not finish, and the log does not hand over to that key\nhelp: remove it (it never signed anything), then run this again",
            next_path.display()
        );
    }
    let old = match CheckpointSigner::load(&key_path) {
        Ok(signer) => Some(signer),
        Err(AuditError::KeyMissing { .. }) => None,
        Err(e) => anyhow::bail!(
            "{e}\nhelp: fix the key file; or, if it is lost for good, move it aside and run this again (the rotation then records that the old key did not sign it)"
        ),
    };
    if old.is_none() && !runtime::audit_has_history(&home) {
        anyhow::bail!(
            "there is no audit signing key and no audit log to rotate\nhelp: run `airlock init` to create the first key"
        );
    }
    // Without the secret, the public half lets verify still check the old checkpoints.
    let old_public = match &old {
        Some(_) => None,
        None => airlock_audit::load_verifier(&airlock_audit::public_key_path(&key_path)).ok(),
    };
    let new = CheckpointSigner::generate().map_err(|e| anyhow::anyhow!("{e}"))?;
    new.write_new(&next_path)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let old_id = old
        .as_ref()
        .map(|s| s.key_id().to_string())
        .or_else(|| old_public.as_ref().map(airlock_audit::key_id));
    let signed_by_old = old.is_some();
    let rotation = KeyRotation {
        old,
        old_public,
        new: new.clone(),
        principal: crate::service::approvals::OPERATOR.to_string(),
    };
    let receipt = airlock_audit::rotate_key(
        &home.audit_dir(),
        Some(&home.audit_mark()),
        runtime::audit_options(&cfg),
        rotation,
    );
    let receipt = match receipt {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&next_path);
            anyhow::bail!("{e}");
        }
    };
    install_key(&key_path, &next_path)?;
    let pub_path = airlock_audit::public_key_path(&key_path);
    let old_id = old_id.unwrap_or_else(|| "(unknown)".into());
    if signed_by_old {
        crate::out!(
            "rotated the audit signing key: key {old_id} signed record #{} naming the new key {}",
            receipt.seq,
            new.key_id()
        );
    } else {
        crate::out!(
            "rotated the audit signing key to {} at record #{}\nwarning: the old key {old_id} was not there to sign the change; `airlock audit verify` reports this break",
            new.key_id(),
            receipt.seq
        );
    }
    crate::out!(
        "new public key {}; keep a copy of it outside this machine",
        pub_path.display()
    );
    Ok(0)
}
