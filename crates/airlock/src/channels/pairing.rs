//! Pairing: the one-time code that binds a chat channel's owner, and the count of wrong
//! tries that keeps it unguessable without letting anyone spend it for the owner.
//!
//! Wrong tries are counted per sender: each account gets [`TRIES_PER_SENDER`] at a code,
//! then its codes are not even compared, so a stranger's guesses never use up the
//! owner's tries. A much larger bound over everyone, [`WRONG_PER_CODE`], still ends a
//! brute force from many accounts: a code is one of 32^10 (about 1.1e15), so that many
//! guesses find it with a chance of about one in 10^11, and spending them takes two
//! thousand accounts within the code's ten minutes.
//!
//! Anyone can send a bot codes, and an audit record is written and synced, so refusals
//! are counted by reason and only the 1st, 2nd, 4th, 8th … of each (per code) are
//! recorded, with the count so far: a flood of guesses leaves a handful of records.
//! The counts live in the host's memory; the count of wrong tries from everyone is also
//! written to the channel's state at those times, so a restarted host goes on from it.

use std::collections::HashMap;

use super::ChannelState;

/// How long a pairing code is good for.
pub const PAIRING_SECS: u64 = 600;
/// Wrong codes one sender may send against one pending code; past them, what they send
/// is refused without being compared.
pub const TRIES_PER_SENDER: u32 = 5;
/// Wrong codes from everyone against one pending code before it is void (a new one must
/// be made).
pub const WRONG_PER_CODE: u32 = 10_000;
/// The letters of a pairing code: no 0/O or 1/I to misread.
const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
const CODE_LEN: usize = 10;

/// A new pairing code: random, [`CODE_LEN`] letters.
pub fn new_code() -> anyhow::Result<String> {
    let mut bytes = [0u8; CODE_LEN];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("cannot make a pairing code: no randomness ({e})"))?;
    // 256 is a multiple of the alphabet's 32 letters: every letter is equally likely.
    Ok(bytes
        .iter()
        .map(|b| CODE_ALPHABET[*b as usize % CODE_ALPHABET.len()] as char)
        .collect())
}

pub fn code_hash(code: &str) -> String {
    format!(
        "sha256:{}",
        airlock_core::canonical::sha256_hex(code.trim().to_ascii_uppercase().as_bytes())
    )
}

/// The code a pairing message carries: the message itself, or after `/start` or `/pair`
/// (Telegram's deep links send `/start <payload>`).
pub fn code_in(text: &str) -> Option<&str> {
    let t = text.trim();
    let code = t
        .strip_prefix("/start ")
        .or_else(|| t.strip_prefix("/pair "))
        .unwrap_or(t)
        .trim();
    (code.len() == CODE_LEN && code.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(code)
}

/// Why a message before pairing binds nobody.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unpaired {
    /// It carries no code (or not from a private chat, or it is a forward).
    NotACode,
    /// No code is pending: none was made, it expired, it was used, or the channel is
    /// paired already.
    NoCode,
    /// A code, but not the pending one.
    Wrong,
    /// The sender has had their tries at the pending code; it was not compared.
    OutOfTries,
    /// The pending code had [`WRONG_PER_CODE`] wrong tries and is void.
    Void,
}

impl Unpaired {
    /// The reason, as the record of the refusal gives it.
    pub fn reason(self) -> &'static str {
        match self {
            Unpaired::NotACode => "the channel is not paired",
            Unpaired::NoCode => "no pairing code is pending",
            Unpaired::Wrong => "a wrong pairing code",
            Unpaired::OutOfTries => "the sender has had their tries at the pairing code",
            Unpaired::Void => "the pairing code is void after too many wrong tries",
        }
    }
}

/// A refused message before pairing, as counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub why: Unpaired,
    /// The number of refusals of this kind at the pending code so far, when this one is
    /// to be recorded (the 1st, 2nd, 4th …); `None`: counted only.
    pub record: Option<u64>,
    /// This wrong try used up [`WRONG_PER_CODE`]: the code is to be made void now.
    pub voids: bool,
    /// The hash of the pending code (empty: none is pending), and its wrong tries from
    /// everyone so far.
    pub code_hash: String,
    pub wrong: u32,
}

/// What a pairing code sent to the bot is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// The pending code, in time, from a sender with tries left: bind them with
    /// [`spend_code`] under the state's lock.
    Right {
        code_hash: String,
    },
    Refused(Refusal),
}

/// The tries at the pending code, counted in memory (see the module's docs).
#[derive(Debug, Default)]
pub struct PairingTries {
    /// The hash of the code the counts are for (empty: none is pending); another code
    /// starts them anew.
    code_hash: String,
    /// Wrong tries by sender. Only a wrong try adds an entry, so there are at most
    /// [`WRONG_PER_CODE`] of them.
    by_sender: HashMap<String, u32>,
    /// Wrong tries from everyone.
    wrong: u32,
    /// Refusals by kind, for records at powers of two.
    refused: crate::sampled_refusals::SampledRefusals<Unpaired>,
}

impl PairingTries {
    /// Count from the code pending in `state` at `now`, starting anew when it is not the
    /// one counted so far (from the wrong tries the state says it had).
    fn follow(&mut self, state: &ChannelState, now: u64) {
        let pending = state
            .pairing
            .as_ref()
            .filter(|p| state.owner.is_none() && now < p.expires_at);
        let hash = pending.map_or("", |p| p.code_hash.as_str());
        if hash != self.code_hash {
            *self = PairingTries {
                code_hash: hash.to_string(),
                wrong: pending.map_or(0, |p| p.attempts),
                ..PairingTries::default()
            };
        }
    }

    fn refuse(&mut self, why: Unpaired, voids: bool) -> Refusal {
        Refusal {
            why,
            record: self.refused.count(why),
            voids,
            code_hash: self.code_hash.clone(),
            wrong: self.wrong,
        }
    }

    /// Count a message before pairing that carries no code to try.
    pub fn not_a_code(&mut self, state: &ChannelState, now: u64) -> Refusal {
        self.follow(state, now);
        self.refuse(Unpaired::NotACode, false)
    }

    /// Judge `code`, sent by platform user `from`, against the code pending in `state`
    /// at `now`. Nothing is written: a right code is bound by [`spend_code`], a voided
    /// one cleared by [`void_code`].
    pub fn judge(&mut self, state: &ChannelState, code: &str, from: &str, now: u64) -> Judged {
        self.follow(state, now);
        if self.code_hash.is_empty() {
            return Judged::Refused(self.refuse(Unpaired::NoCode, false));
        }
        if self.wrong >= WRONG_PER_CODE {
            return Judged::Refused(self.refuse(Unpaired::Void, false));
        }
        // Before the comparison: past their tries, a sender learns nothing more.
        if self.by_sender.get(from).copied().unwrap_or(0) >= TRIES_PER_SENDER {
            return Judged::Refused(self.refuse(Unpaired::OutOfTries, false));
        }
        if code_hash(code) == self.code_hash {
            return Judged::Right {
                code_hash: self.code_hash.clone(),
            };
        }
        *self.by_sender.entry(from.to_string()).or_default() += 1;
        self.wrong += 1;
        let voids = self.wrong >= WRONG_PER_CODE;
        Judged::Refused(self.refuse(Unpaired::Wrong, voids))
    }

    /// Wrong tries at the pending code from everyone so far.
    pub fn wrong(&self) -> u32 {
        self.wrong
    }
}

/// Bind `from` as the owner by the pending code whose hash is `code_hash`, at `now`,
/// spending it; under the state's lock. `false`, changing nothing, when that code is no
/// longer pending (it expired, was used, or a new one replaced it).
pub fn spend_code(state: &mut ChannelState, code_hash: &str, from: &str, now: u64) -> bool {
    let pending = state
        .pairing
        .as_ref()
        .is_some_and(|p| p.code_hash == code_hash && now < p.expires_at);
    if state.owner.is_some() || !pending {
        return false;
    }
    state.pairing = None;
    state.owner = Some(from.to_string());
    true
}

/// Make the pending code whose hash is `code_hash` void, if it is still pending.
pub fn void_code(state: &mut ChannelState, code_hash: &str) {
    if state
        .pairing
        .as_ref()
        .is_some_and(|p| p.code_hash == code_hash)
    {
        state.pairing = None;
    }
}

/// Keep `wrong`, the wrong tries counted at the code whose hash is `code_hash`, in the
/// state, for a restarted host to go on from.
pub fn keep_wrong(state: &mut ChannelState, code_hash: &str, wrong: u32) {
    if let Some(p) = state.pairing.as_mut().filter(|p| p.code_hash == code_hash) {
        p.attempts = p.attempts.max(wrong);
    }
}

#[cfg(test)]
mod tests {
    use super::super::Pairing;
    use super::*;

    fn pending(code: &str) -> ChannelState {
        ChannelState {
            pairing: Some(Pairing {
                code_hash: code_hash(code),
                expires_at: 1000,
                attempts: 0,
            }),
            ..ChannelState::default()
        }
    }

    fn why(j: Judged) -> Unpaired {
        match j {
            Judged::Refused(r) => r.why,
            Judged::Right { .. } => panic!("the code was taken"),
        }
    }

    #[test]
    fn the_right_code_in_time_binds_its_sender_once() {
        let code = new_code().unwrap();
        assert_eq!(code.len(), CODE_LEN);
        let mut s = pending(&code);
        let msg = format!("/start {code}");
        assert_eq!(code_in(&msg), Some(code.as_str()));
        let mut tries = PairingTries::default();
        let Judged::Right { code_hash: hash } = tries.judge(&s, &code.to_lowercase(), "42", 999)
        else {
            panic!("the right code was refused");
        };
        assert!(spend_code(&mut s, &hash, "42", 999));
        assert_eq!(s.owner.as_deref(), Some("42"));
        assert!(s.pairing.is_none());
        // Spent: neither the same code again nor a second binding.
        assert_eq!(why(tries.judge(&s, &code, "43", 999)), Unpaired::NoCode);
        assert!(!spend_code(&mut s, &hash, "43", 999));
        assert_eq!(s.owner.as_deref(), Some("42"));
        assert_eq!(code_in("hello there"), None);
    }

    #[test]
    fn a_late_code_binds_nobody() {
        let mut s = pending("ABCDEFGHJK");
        let mut tries = PairingTries::default();
        assert_eq!(
            why(tries.judge(&s, "ABCDEFGHJK", "42", 1000)),
            Unpaired::NoCode
        );
        assert!(!spend_code(&mut s, &code_hash("ABCDEFGHJK"), "42", 1000));
        assert!(s.owner.is_none());
    }

    /// The denial of service this guards against: a stranger's wrong guesses must not
    /// void the code the owner is about to send.
    #[test]
    fn a_strangers_wrong_tries_do_not_spend_the_owners() {
        let s = pending("ABCDEFGHJK");
        let mut tries = PairingTries::default();
        for _ in 0..TRIES_PER_SENDER {
            assert_eq!(why(tries.judge(&s, "ZZZZZZZZZZ", "66", 1)), Unpaired::Wrong);
        }
        // Past their tries the stranger's codes are not compared, the right one neither.
        for code in ["ZZZZZZZZZZ", "ABCDEFGHJK"] {
            assert_eq!(why(tries.judge(&s, code, "66", 1)), Unpaired::OutOfTries);
        }
        // The owner has all of theirs.
        for _ in 0..TRIES_PER_SENDER - 1 {
            assert_eq!(why(tries.judge(&s, "YYYYYYYYYY", "42", 1)), Unpaired::Wrong);
        }
        assert!(matches!(
            tries.judge(&s, "ABCDEFGHJK", "42", 1),
            Judged::Right { .. }
        ));
    }

    /// Many accounts together have a bound: the code is void once they spent it, and
    /// then not even the right code binds.
    #[test]
    fn a_brute_force_from_many_accounts_voids_the_code() {
        let s = pending("ABCDEFGHJK");
        let mut tries = PairingTries::default();
        let mut voided = 0;
        let mut recorded = Vec::new();
        for n in 0..WRONG_PER_CODE {
            let from = format!("bot-{}", n / TRIES_PER_SENDER);
            let Judged::Refused(r) = tries.judge(&s, "ZZZZZZZZZZ", &from, 1) else {
                panic!("a wrong code was taken");
            };
            assert_eq!(r.why, Unpaired::Wrong);
            voided += usize::from(r.voids);
            recorded.extend(r.record);
        }
        assert_eq!(voided, 1, "the last wrong try voids the code, once");
        assert!(tries.by_sender.len() <= WRONG_PER_CODE as usize);
        assert_eq!(
            why(tries.judge(&s, "ABCDEFGHJK", "fresh", 1)),
            Unpaired::Void
        );
        // Ten thousand refusals, fourteen records.
        let expected: Vec<u64> = (0..14).map(|k| 1 << k).collect();
        assert_eq!(recorded, expected);
    }

    #[test]
    fn a_new_code_starts_the_counts_anew_and_a_restart_goes_on_from_the_state() {
        let mut s = pending("ABCDEFGHJK");
        let mut tries = PairingTries::default();
        for _ in 0..TRIES_PER_SENDER {
            tries.judge(&s, "ZZZZZZZZZZ", "66", 1);
        }
        keep_wrong(&mut s, &code_hash("ABCDEFGHJK"), tries.wrong());
        assert_eq!(s.pairing.as_ref().unwrap().attempts, TRIES_PER_SENDER);
        // A host started again counts on from what the state kept.
        let mut again = PairingTries::default();
        again.judge(&s, "ZZZZZZZZZZ", "67", 1);
        assert_eq!(again.wrong(), TRIES_PER_SENDER + 1);
        // A new code: the stranger has tries again, and records start at one.
        let s = pending("KJHGFEDCBA");
        let Judged::Refused(r) = tries.judge(&s, "ZZZZZZZZZZ", "66", 1) else {
            panic!("a wrong code was taken");
        };
        assert_eq!((r.why, r.record), (Unpaired::Wrong, Some(1)));
        assert_eq!(tries.wrong(), 1);
        let mut s = s;
        void_code(&mut s, &code_hash("ABCDEFGHJK"));
        assert!(s.pairing.is_some(), "another code's void left this one");
        void_code(&mut s, &code_hash("KJHGFEDCBA"));
        assert!(s.pairing.is_none());
    }
}
