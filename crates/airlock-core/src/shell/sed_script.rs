//! A scanner for sed scripts that finds the commands with effects beyond the stream:
//! `e` (run a command), the `s///e` flag, `w`/`W` and `s///w` (write a file), and
//! `r`/`R` (read a file).
//!
//! Written by hand because no crate parses sed scripts; it follows the GNU sed grammar
//! for addresses, `s` and `y` delimiters, and the commands that take text to end of line.

/// What a sed script does besides editing its stream.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SedEffects {
    /// The script runs shell commands (`e`, `s///e`).
    pub executes: bool,
    /// Files the script writes.
    pub writes: Vec<String>,
    /// Files the script reads.
    pub reads: Vec<String>,
}

/// Scan `script`. Unknown syntax is skipped, never an error: sed itself rejects it.
pub(crate) fn scan(script: &str) -> SedEffects {
    let chars: Vec<char> = script.chars().collect();
    let mut fx = SedEffects::default();
    let mut i = 0;
    while i < chars.len() {
        i = skip_address(&chars, i);
        let Some(&c) = chars.get(i) else { break };
        i += 1;
        match c {
            's' => {
                let Some(&delim) = chars.get(i) else { break };
                i = skip_delimited(&chars, i + 1, delim);
                i = skip_delimited(&chars, i, delim);
                // Flags up to the end of the command.
                while let Some(&f) = chars.get(i) {
                    match f {
                        'e' => {
                            fx.executes = true;
                            i += 1;
                        }
                        'w' => {
                            let (name, next) = rest_of_line(&chars, i + 1);
                            fx.writes.push(name);
                            i = next;
                            break;
                        }
                        ';' | '\n' | '}' => break,
                        _ => i += 1,
                    }
                }
            }
            'y' => {
                let Some(&delim) = chars.get(i) else { break };
                i = skip_delimited(&chars, i + 1, delim);
                i = skip_delimited(&chars, i, delim);
            }
            'e' => {
                fx.executes = true;
                let (_, next) = rest_of_line(&chars, i);
                i = next;
            }
            'w' | 'W' => {
                let (name, next) = rest_of_line(&chars, i);
                fx.writes.push(name);
                i = next;
            }
            'r' | 'R' => {
                let (name, next) = rest_of_line(&chars, i);
                fx.reads.push(name);
                i = next;
            }
            // Commands whose argument runs to the end of the line.
            'a' | 'i' | 'c' | ':' | 'b' | 't' | 'T' | 'q' | 'Q' | 'l' | 'L' | 'v' => {
                let stop_at_semicolon = matches!(c, 'b' | 't' | 'T' | 'q' | 'Q' | 'l' | 'L' | 'v');
                while let Some(&n) = chars.get(i) {
                    if n == '\n' || (stop_at_semicolon && (n == ';' || n == '}')) {
                        break;
                    }
                    if n == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            '#' => {
                while chars.get(i).is_some_and(|&n| n != '\n') {
                    i += 1;
                }
            }
            _ => {}
        }
    }
    fx
}

/// Skip whitespace, separators and an address (`1`, `$`, `/re/`, `\%re%`, `a,b`, `!`).
fn skip_address(chars: &[char], mut i: usize) -> usize {
    loop {
        match chars.get(i) {
            Some(' ' | '\t' | '\n' | ';' | '{' | '}' | '!' | ',' | '~' | '+' | '$') => i += 1,
            Some(c) if c.is_ascii_digit() => i += 1,
            Some('/') => i = skip_delimited(chars, i + 1, '/'),
            Some('\\') => match chars.get(i + 1) {
                Some(&d) => i = skip_delimited(chars, i + 2, d),
                None => return i + 1,
            },
            Some('I' | 'M') if i > 0 && chars[i - 1] == '/' => i += 1,
            _ => return i,
        }
    }
}

/// Skip to just past the next unescaped `delim`.
fn skip_delimited(chars: &[char], mut i: usize, delim: char) -> usize {
    while let Some(&c) = chars.get(i) {
        if c == '\\' {
            i += 2;
            continue;
        }
        i += 1;
        if c == delim {
            break;
        }
    }
    i
}

/// The file name argument of `w`, `r`, …: to the end of the line, leading blanks removed.
fn rest_of_line(chars: &[char], mut i: usize) -> (String, usize) {
    while chars.get(i).is_some_and(|c| *c == ' ' || *c == '\t') {
        i += 1;
    }
    let start = i;
    while chars.get(i).is_some_and(|c| *c != '\n') {
        i += 1;
    }
    (chars[start.min(chars.len())..i].iter().collect(), i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_substitutions_have_no_effects() {
        assert_eq!(scan("s/a/b/g; 1,3d; /x/!p"), SedEffects::default());
        assert_eq!(scan("s|e|w|g"), SedEffects::default());
        assert_eq!(scan(r"s/\/e/x/"), SedEffects::default());
        assert_eq!(scan("y/abc/ewr/"), SedEffects::default());
        assert_eq!(scan("1i\\echo hi"), SedEffects::default());
    }

    #[test]
    fn execute_and_file_commands() {
        assert!(scan("1e id").executes);
        assert!(scan("s/.*/id/e").executes);
        assert!(scan("/x/ { e\n}").executes);
        assert_eq!(scan("s/a/b/w out.txt").writes, ["out.txt"]);
        assert_eq!(scan("1w /tmp/x").writes, ["/tmp/x"]);
        assert_eq!(scan("$r /etc/passwd").reads, ["/etc/passwd"]);
    }
}
