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
    let home = Home::from_env()?;
    let records = airlock_audit::tail(&home.audit_dir(), n).map_err(|e| anyhow::anyhow!("{e}"))?;
    for r in records {
        if as_json {
            crate::out!("{r}");
        } else {
            crate::out!("{}", airlock_audit::format_record_line(&r));
        }
    }
    Ok(0)
}
