//! `airlock audit verify|tail`.

use crate::home::Home;

pub fn verify() -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let key_path = airlock_audit::public_key_path(&home.audit_key());
    let key = airlock_audit::load_verifier(&key_path)
        .map_err(|e| anyhow::anyhow!("{e}\nhelp: run `airlock init` first"))?;
    let report =
        airlock_audit::verify(&home.audit_dir(), &key).map_err(|e| anyhow::anyhow!("{e}"))?;
    match &report.problem {
        None => {
            crate::out!(
                "audit log OK: {} records, {} signed checkpoints (last covers seq {}), {} unsigned tail records",
                report.records,
                report.checkpoints,
                report.last_checkpoint_seq.map_or("-".into(), |s| s.to_string()),
                report.unsigned_tail
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
    use airlock_audit::TailRecord;
    use airlock_core::terminal_text::escape_json_text;

    // Only the offsets of the lines asked for are held; this bounds them.
    const MAX_TAIL: usize = 1_000_000;
    if n > MAX_TAIL {
        anyhow::bail!(
            "-n {n} asks for more than {MAX_TAIL} records\nhelp: give -n {MAX_TAIL} or fewer, or read the log file itself"
        );
    }
    let home = Home::from_env()?;
    let mut unreadable = 0usize;
    let printed = airlock_audit::for_each_tail_record(&home.audit_dir(), n, |r| {
        match r {
            TailRecord::Record(v) if as_json => crate::out!("{}", escape_json_text(&v.to_string())),
            TailRecord::Record(v) => crate::out!("{}", airlock_audit::format_record_line(&v)),
            TailRecord::Unreadable {
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
        }
        Ok::<(), anyhow::Error>(())
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    printed?;
    if unreadable > 0 {
        eprintln!(
            "airlock: {unreadable} of the last lines of the audit log are not records\nhelp: run `airlock audit verify` to check the log"
        );
        return Ok(1);
    }
    Ok(0)
}
