//! Ranking for `memory_search`: which recall records of one namespace best match a query.
//!
//! `memory_fts` (FTS5) scores each matching row with bm25, and that is most of a search's
//! cost (about half a microsecond a row, measured over 100,000 notes; see docs/memory.md).
//! Three things keep the cost down without changing the answer:
//!
//! - Rows are ranked with `bm25()` in SQLite's sorter, which keeps only the best rows as it
//!   goes; FTS5's own `ORDER BY rank` cursor sorts every matching row first and costs a
//!   third more.
//! - The namespace is not checked inside FTS5: a filter on its UNINDEXED `namespace` column
//!   reads every matching row's content. The best rows of the whole index are ranked first
//!   and then joined to `memory_records`, whose namespace is the authority. When other
//!   namespaces crowd the caller's rows out of that window, the search runs again over every
//!   match, so the result is always exactly the caller's best rows.
//! - A word in at least half of all indexed rows carries no weight: FTS5 clamps its bm25 IDF
//!   to 1e-6. When a query also has rarer words, those are searched alone first; the common
//!   words could only break near-ties (see [`CLAMPED_TERM_BOUND`]). The full query runs only
//!   when the rarer words find fewer than `limit` records.

use rusqlite::{params, OptionalExtension, Transaction};

use crate::error::StoreError;

/// Most words of a search query that are used.
const MAX_QUERY_WORDS: usize = 16;

/// How many of the index's best rows are fetched per result wanted, before the namespace
/// filter: room for other namespaces' rows without ranking every match again.
const WINDOW_PER_RESULT: usize = 8;
/// Smallest window of best rows fetched before the namespace filter.
const MIN_WINDOW: usize = 64;

/// More than any one clamped word can add to a row's bm25 score: FTS5 gives such a word an
/// IDF of 1e-6, and bm25's term-frequency factor `tf·(k1+1) / (tf + k1·(1−b+b·len/avglen))`
/// stays below `k1 + 1` (2.2 with FTS5's k1 = 1.2, b = 0.75).
const CLAMPED_TERM_BOUND: f64 = 1e-6 * 2.2;

/// One ranked row: `memory_records.rowid` and its bm25 score (lower is better).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Hit {
    /// `rowid` of the record in `memory_records` (and `memory_fts`).
    pub rowid: i64,
    /// bm25 score from FTS5: negative, and the lower the better.
    pub score: f64,
}

/// The words of a query (runs of letters and digits), at most [`MAX_QUERY_WORDS`].
pub(crate) fn query_words(query: &str) -> Vec<&str> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(MAX_QUERY_WORDS)
        .collect()
}

/// Words, each quoted, joined with OR: the model's text is never FTS syntax.
pub(crate) fn fts_expr(words: &[&str]) -> Option<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
    (!quoted.is_empty()).then(|| quoted.join(" OR "))
}

/// The best `limit` recall rows of namespace `ns_key` for `words`, best first.
pub(crate) fn ranked(
    tx: &Transaction<'_>,
    ns_key: &str,
    words: &[&str],
    limit: usize,
) -> Result<Vec<Hit>, StoreError> {
    let Some(full) = fts_expr(words) else {
        return Ok(vec![]);
    };
    if let Some((informative, dropped)) = informative_words(tx, words)? {
        if let Some(expr) = fts_expr(&informative) {
            let hits = ranked_in_namespace(tx, ns_key, &expr, limit)?;
            // Every row outside these hits scores below `dropped · CLAMPED_TERM_BOUND`, so
            // once the weakest hit is clearly above that, the full query would rank the
            // same rows first.
            let clear = hits
                .last()
                .is_some_and(|h| -h.score > dropped as f64 * CLAMPED_TERM_BOUND);
            if hits.len() >= limit && clear {
                return Ok(hits);
            }
        }
    }
    ranked_in_namespace(tx, ns_key, &full, limit)
}

/// The best `limit` rows of the namespace for an FTS expression, best first.
fn ranked_in_namespace(
    tx: &Transaction<'_>,
    ns_key: &str,
    expr: &str,
    limit: usize,
) -> Result<Vec<Hit>, StoreError> {
    // The planner must not start from `memory_records` (every record of a namespace):
    // CROSS JOIN keeps the ranked rows as the outer loop.
    const WINDOWED: &str = "SELECT f.rowid, f.score
         FROM (SELECT rowid, bm25(memory_fts) AS score FROM memory_fts
               WHERE memory_fts MATCH ?1 ORDER BY score LIMIT ?4) f
         CROSS JOIN memory_records r ON r.rowid = f.rowid
         WHERE r.namespace = ?2
         ORDER BY f.score LIMIT ?3";
    const EVERY_MATCH: &str = "SELECT memory_fts.rowid, bm25(memory_fts) AS score
         FROM memory_fts CROSS JOIN memory_records r ON r.rowid = memory_fts.rowid
         WHERE memory_fts MATCH ?1 AND r.namespace = ?2
         ORDER BY score LIMIT ?3";
    let window = (limit * WINDOW_PER_RESULT).max(MIN_WINDOW);
    let collect = |sql: &str, window: Option<usize>| -> Result<Vec<Hit>, StoreError> {
        let mut stmt = tx.prepare_cached(sql)?;
        let map = |r: &rusqlite::Row<'_>| {
            Ok(Hit {
                rowid: r.get(0)?,
                score: r.get(1)?,
            })
        };
        let rows = match window {
            Some(w) => stmt.query_map(params![expr, ns_key, limit as i64, w as i64], map)?,
            None => stmt.query_map(params![expr, ns_key, limit as i64], map)?,
        };
        Ok(rows.collect::<Result<_, _>>()?)
    };
    let hits = collect(WINDOWED, Some(window))?;
    if hits.len() >= limit {
        return Ok(hits);
    }
    // Fewer than `limit`: either there are no more matches (and this repeats a small
    // search), or other namespaces filled the window.
    collect(EVERY_MATCH, None)
}

/// The query's words without those that carry no bm25 weight, and how many were left
/// out; `None` when nothing would be left out (or nothing kept).
///
/// Only ASCII words are judged: unicode61 folds ASCII case and splits on exactly the
/// characters [`query_words`] splits on, so such a word is the one token looked up in
/// `memory_fts_terms`. Any other word is kept, which can only cost time.
fn informative_words<'q>(
    tx: &Transaction<'_>,
    words: &[&'q str],
) -> Result<Option<(Vec<&'q str>, usize)>, StoreError> {
    if words.len() < 2 {
        return Ok(None);
    }
    let Some(rows) = indexed_rows(tx)? else {
        return Ok(None);
    };
    let mut stmt = tx.prepare_cached("SELECT doc FROM memory_fts_terms WHERE term = ?1")?;
    let mut kept = Vec::with_capacity(words.len());
    let mut seen: Vec<(String, bool)> = Vec::new();
    for &word in words {
        let clamped = if word.is_ascii() {
            let token = word.to_ascii_lowercase();
            match seen.iter().find(|(t, _)| *t == token) {
                Some(&(_, c)) => c,
                None => {
                    let docs: i64 = stmt
                        .query_row([&token], |r| r.get(0))
                        .optional()?
                        .unwrap_or(0);
                    // FTS5: idf = ln((N − n + 0.5) / (n + 0.5)), clamped when ≤ 0, i.e. 2n ≥ N.
                    let c = 2 * docs >= rows;
                    seen.push((token, c));
                    c
                }
            }
        } else {
            false
        };
        if !clamped {
            kept.push(word);
        }
    }
    let dropped = words.len() - kept.len();
    Ok((dropped > 0 && !kept.is_empty()).then_some((kept, dropped)))
}

/// The row count bm25 uses (FTS5's `xRowCount`): the first varint of the index's averages
/// record (`memory_fts_data` row 1). `None` for an empty index or a record this code does
/// not understand, which only turns off leaving out common words.
pub(crate) fn indexed_rows(tx: &Transaction<'_>) -> Result<Option<i64>, StoreError> {
    let block: Option<Vec<u8>> = tx
        .query_row("SELECT block FROM memory_fts_data WHERE id = 1", [], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(block
        .as_deref()
        .and_then(sqlite_varint)
        .and_then(|n| i64::try_from(n).ok())
        .filter(|&n| n > 0))
}

/// SQLite's record varint (big-endian, 7 bits a byte, the ninth byte whole), which FTS5
/// uses in its index records. Written here because rusqlite does not expose SQLite's.
fn sqlite_varint(bytes: &[u8]) -> Option<u64> {
    let mut value: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(9) {
        if i == 8 {
            return Some((value << 8) | u64::from(b));
        }
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{fts_expr, indexed_rows, query_words, sqlite_varint};
    use crate::memory::traits::MemoryStore;
    use crate::memory::types::{MemoryChange, MemoryWrite, Tier, WriteProvenance};
    use crate::memory::{MemoryRecord, Namespace, Note};
    use crate::sqlite::SqliteStore;
    use crate::time::Timestamp;

    /// The row count read from the averages record is the one FTS5 keeps, through
    /// inserts, changes, forgets and records that leave the index for the pinned tier.
    #[test]
    fn indexed_rows_follow_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(dir.path()).unwrap();
        let ns = Namespace::new("airlock", "owner").unwrap();
        let by = WriteProvenance {
            session_id: "s-1".into(),
            principal: "owner".into(),
            tainted: false,
            tool_call_id: "call-1".into(),
        };
        let now = Timestamp::from_unix_ms(1_800_000_000_000);
        let count = || {
            s.read(|tx| {
                let fts: i64 = tx.query_row("SELECT count(*) FROM memory_fts", [], |r| r.get(0))?;
                Ok((indexed_rows(tx)?, fts))
            })
            .unwrap()
        };
        assert_eq!(count(), (None, 0));
        let put = |id: Option<String>, text: &str| MemoryWrite {
            id,
            tier: Tier::Recall,
            change: MemoryChange::Put(MemoryRecord::Note(Note { text: text.into() })),
        };
        let mut ids = Vec::new();
        for i in 0..300 {
            let v = s.memory_write(&ns, &put(None, &format!("note {i}")), &by, now);
            ids.push(v.unwrap().record_id);
        }
        assert_eq!(count(), (Some(300), 300));
        for id in &ids[..50] {
            s.memory_write(&ns, &put(Some(id.clone()), "changed"), &by, now)
                .unwrap();
        }
        for id in &ids[50..90] {
            let forget = MemoryWrite {
                id: Some(id.clone()),
                tier: Tier::Recall,
                change: MemoryChange::Forget,
            };
            s.memory_write(&ns, &forget, &by, now).unwrap();
        }
        assert_eq!(count(), (Some(260), 260));
    }

    #[test]
    fn queries_are_words_never_fts_syntax() {
        let words = query_words("NEAR(a b) OR namespace:x*");
        assert_eq!(
            fts_expr(&words).unwrap(),
            "\"NEAR\" OR \"a\" OR \"b\" OR \"OR\" OR \"namespace\" OR \"x\""
        );
        assert_eq!(fts_expr(&query_words("  ---  ")), None);
        assert_eq!(query_words(&"w ".repeat(40)).len(), 16);
    }

    #[test]
    fn varints_decode_like_sqlite() {
        assert_eq!(sqlite_varint(&[0x04, 0x08]), Some(4));
        assert_eq!(sqlite_varint(&[0x81, 0x00]), Some(128));
        assert_eq!(sqlite_varint(&[0x86, 0x8d, 0x20]), Some(100_000));
        assert_eq!(sqlite_varint(&[0xff; 9]), Some(u64::MAX));
        assert_eq!(sqlite_varint(&[0x80]), None);
        assert_eq!(sqlite_varint(&[]), None);
    }
}
