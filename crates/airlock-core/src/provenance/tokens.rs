//! Whole tokens of text, the unit in which a value is compared with what someone wrote.
//!
//! A value traces to a text only as a whole token (or a run of whole tokens), never as a
//! piece of one: `12` is not in `2024-12-01`, `Bob` is not in `Bobby`. A token is a
//! whitespace-separated word with the punctuation that surrounds words in sentences and
//! data listings (quotes, brackets, a final full stop or comma, a possessive `'s`)
//! trimmed off. Hyphens, dots, colons and slashes *inside* a token stay: they are what
//! make a date, a time, an amount or a file name one thing.

/// Characters trimmed from the start of a token.
const LEADING: &[char] = &[
    '"', '\'', '(', '[', '{', '<', '*', '`', '#', '$', '€', '£', '‘', '“', '«',
];
/// Characters trimmed from the end of a token.
const TRAILING: &[char] = &[
    '"', '\'', ')', ']', '}', '>', '*', '`', '.', ',', ';', ':', '!', '?', '’', '”', '»',
];

/// Normalize one whitespace-separated word into a token (lower case, surrounding
/// punctuation and a possessive removed). Empty when nothing is left.
pub fn normalize_token(word: &str) -> String {
    let mut w = word.trim_start_matches(LEADING).trim_end_matches(TRAILING);
    for suffix in ["'s", "’s"] {
        if w.len() > suffix.len() && w.to_lowercase().ends_with(suffix) {
            w = &w[..w.len() - suffix.len()];
        }
    }
    w.trim_end_matches(TRAILING).to_lowercase()
}

/// The tokens of `text`, in order.
pub fn tokens(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(normalize_token)
        .filter(|t| !t.is_empty())
        .collect()
}

/// The tokens of `text` with the byte span of the word each came from.
pub fn tokens_with_spans(text: &str) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, text.len()));
    }
    out.into_iter()
        .map(|(s, e)| (normalize_token(&text[s..e]), s, e))
        .filter(|(t, _, _)| !t.is_empty())
        .collect()
}

/// Month names as tokens (lower case), full and abbreviated.
const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
];

/// Which of `toks` are a day of the month beside its month's name ("June 13", "13 June",
/// "May 26, 2024"): part of a date, not a number standing for itself. Such a number
/// neither traces an identifier ("what do we do on June 13" names no file 13) nor talks
/// about one ("Rome, Italy: June 26 - June 30" says nothing of file 26).
pub fn date_days(toks: &[String]) -> Vec<bool> {
    let is_month = |t: Option<&String>| t.is_some_and(|t| MONTHS.contains(&t.as_str()));
    (0..toks.len())
        .map(|i| {
            let t = &toks[i];
            let day = t.len() <= 2
                && t.parse::<u8>().is_ok_and(|d| (1..=31).contains(&d))
                && t.chars().all(|c| c.is_ascii_digit());
            day && (is_month(i.checked_sub(1).map(|p| &toks[p])) || is_month(toks.get(i + 1)))
        })
        .collect()
}

/// `toks` with each day of a month marked as one (`13` → `13@date`), so that it matches
/// only the same date, never the number alone.
pub fn mark_date_days(mut toks: Vec<String>) -> Vec<String> {
    let days = date_days(&toks);
    for (t, day) in toks.iter_mut().zip(days) {
        if day {
            t.push_str("@date");
        }
    }
    toks
}

/// Does `needle` occur in `hay` as a contiguous run of whole tokens? Never for an empty
/// needle: a value with no tokens (`((+(((`, whose brackets are trimmed away) is not
/// found in trusted text, since what was trimmed could carry data. A caller for which
/// an empty value is harmless says so itself.
pub fn contains_run(hay: &[String], needle: &[String]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Is `n` one of the tokens of `hay`, read as a number (`10.0` matches `10.00`)?
pub fn contains_number(hay: &[String], n: f64) -> bool {
    hay.iter()
        .filter_map(|t| t.parse::<f64>().ok())
        .any(|x| (x - n).abs() < 1e-9)
}

/// The text form of a JSON number as people write it (`7`, not `7.0`).
pub fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_day_beside_its_month_is_part_of_a_date() {
        let marked = mark_date_days(t("On June 13, and 26 May 2024, file 13 of 31 and may 40"));
        assert_eq!(
            marked,
            vec![
                "on", "june", "13@date", "and", "26@date", "may", "2024", "file", "13", "of", "31",
                "and", "may", "40"
            ]
        );
        assert!(!contains_number(&marked[..3], 13.0));
        assert!(contains_run(&marked, &mark_date_days(t("June 13"))));
    }
    use super::*;

    fn t(s: &str) -> Vec<String> {
        tokens(s)
    }

    #[test]
    fn punctuation_around_words_is_trimmed() {
        assert_eq!(
            t("Pay 'bill.txt', (ID 7). Bob's #Oscars"),
            vec!["pay", "bill.txt", "id", "7", "bob", "oscars"]
        );
    }

    #[test]
    fn a_number_inside_a_date_or_time_is_not_a_token() {
        let hay = t("meet on 2024-12-01 at 10:20, file v1.2");
        assert!(!hay.contains(&"12".to_string()));
        assert!(!contains_number(&hay, 12.0));
        assert!(!contains_number(&hay, 20.0));
        assert!(!contains_number(&hay, 1.0));
        assert!(contains_run(&hay, &t("2024-12-01")));
    }

    #[test]
    fn runs_match_whole_tokens_only() {
        let hay = t("book the Riverside View Hotel's suite");
        assert!(contains_run(&hay, &t("Riverside View Hotel")));
        assert!(!contains_run(&hay, &t("Riverside View Hotels")));
        assert!(!contains_run(&hay, &t("View Hot")));
    }

    /// A possessive ending is cut only from a longer word: a word that is nothing but
    /// the ending stays a token (found by mutation testing: `>` read as `>=`).
    #[test]
    fn a_word_that_is_only_a_possessive_ending_is_kept() {
        assert_eq!(normalize_token("’s"), "’s");
        assert_eq!(normalize_token("x’s"), "x");
        assert_eq!(normalize_token("Bob's"), "bob");
        assert_eq!(t("’s"), vec!["’s"]);
    }

    /// I5: a needle with no tokens is found nowhere. Before, an empty needle was "in"
    /// every text, so a URL value of brackets alone (`((+(((+(`) traced to the owner.
    #[test]
    fn i5_an_empty_needle_is_never_found() {
        let hay = t("check the weather");
        assert!(t("((  (((  (").is_empty());
        assert!(!contains_run(&hay, &t("((  (((  (")));
        assert!(!contains_run(&hay, &[]));
        assert!(!contains_run(&[], &[]));
        assert!(contains_run(&hay, &t("the weather")));
    }

    #[test]
    fn spans_point_at_the_word() {
        let s = "a  'b' c";
        let v = tokens_with_spans(s);
        assert_eq!(v[1], ("b".to_string(), 3, 6));
    }

    #[test]
    fn numbers_read_as_written() {
        assert_eq!(number_text(7.0), "7");
        assert_eq!(number_text(98.7), "98.7");
        // A negative zero is written as people write zero (found by mutation testing:
        // the integral branch read `<` as `==` or `>`).
        assert_eq!(number_text(-0.0), "0");
    }
}
