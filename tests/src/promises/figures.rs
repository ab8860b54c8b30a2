//! Every figure README's promise list states, as the one constant the checks use
//! ([`FIGURES`]), and the reading of that list ([`stated_figures`]): a unit test fails when a
//! number in the list differs from its constant, when the list has a number no constant
//! stands for, or when a constant is not stated there. A promise is checked at the number
//! README gives, or the test says which differs.
use std::time::Duration;

use pulldown_cmark::{Event, Parser, Tag, TagEnd};

/// The README section that lists the promises.
pub const PROMISES_SECTION: &str = "What ck promises, and checks";

/// Rolls under each load of a real server.
pub const ROLLS: usize = 5;
/// An idle ck's CPU at most, in % of one core (the median of the windows).
pub const IDLE_CORE_PERCENT: f64 = 0.1;
/// An idle ck's wake-ups at most, per second (the median of the windows).
pub const IDLE_WAKEUPS_PER_SECOND: u64 = 10;
/// Windows over which an idle ck is measured (their median is held to the bounds).
pub const IDLE_WINDOWS: usize = 3;
/// How long each idle window lasts.
pub const IDLE_WINDOW: Duration = Duration::from_secs(10);

/// One figure of README's promise list: its constant's value and the words that follow the
/// number in README (`5 rolls`: unit `rolls`).
#[derive(Clone, Copy, Debug)]
pub struct Figure {
    /// The constant's name, for messages.
    pub name: &'static str,
    /// Its value.
    pub value: f64,
    /// What follows the number in README.
    pub unit: &'static str,
}

/// Every figure README's promise list states.
pub const FIGURES: [Figure; 5] = [
    Figure {
        name: "ROLLS",
        value: ROLLS as f64,
        unit: "rolls",
    },
    Figure {
        name: "IDLE_CORE_PERCENT",
        value: IDLE_CORE_PERCENT,
        unit: "% of a core",
    },
    Figure {
        name: "IDLE_WAKEUPS_PER_SECOND",
        value: IDLE_WAKEUPS_PER_SECOND as f64,
        unit: "wake-ups a second",
    },
    Figure {
        name: "IDLE_WINDOWS",
        value: IDLE_WINDOWS as f64,
        unit: "windows",
    },
    Figure {
        name: "IDLE_WINDOW",
        value: IDLE_WINDOW.as_secs_f64(),
        unit: "s",
    },
];

/// Spelled-out numbers, which a figure must not hide behind: README writes figures in digits.
const NUMBER_WORDS: [&str; 12] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twenty",
];

/// A number in README's promise list and the text that follows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Stated {
    /// The number as written (`0.1`).
    pub number: String,
    /// The text after it, up to the end of its paragraph or list item.
    pub after: String,
}

/// The prose of section `heading` of the Markdown `text`, one string per paragraph or list
/// item: its text and link text, with code spans and link targets left out (figures are
/// written in prose).
pub fn section_prose(text: &str, heading: &str) -> Vec<String> {
    let mut blocks = vec![String::new()];
    let (mut in_heading, mut heading_text, mut inside) = (false, String::new(), false);
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Heading { .. }) => {
                in_heading = true;
                heading_text.clear();
            }
            Event::End(TagEnd::Heading(_)) => {
                in_heading = false;
                inside = heading_text.trim() == heading;
            }
            Event::Text(t) | Event::Code(t) if in_heading => heading_text.push_str(&t),
            Event::Text(t) if inside => blocks.last_mut().expect("one").push_str(&t),
            Event::SoftBreak | Event::HardBreak if inside => {
                blocks.last_mut().expect("one").push(' ')
            }
            Event::Start(Tag::Paragraph | Tag::Item)
            | Event::End(TagEnd::Paragraph | TagEnd::Item)
                if inside =>
            {
                blocks.push(String::new())
            }
            _ => {}
        }
    }
    blocks
        .into_iter()
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
        .collect()
}

/// Every number in `runs` (digits, with a decimal point or not) with the text after it, and
/// every spelled-out number (as its word).
pub fn numbers_in(runs: &[String]) -> Vec<Stated> {
    let mut found = Vec::new();
    for run in runs {
        let chars: Vec<char> = run.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let starts_word = i == 0 || !chars[i - 1].is_alphanumeric();
            if chars[i].is_ascii_digit() && starts_word {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_digit()
                        || (chars[i] == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)))
                {
                    i += 1;
                }
                found.push(Stated {
                    number: chars[start..i].iter().collect(),
                    after: chars[i..].iter().collect::<String>().trim_start().into(),
                });
                continue;
            }
            if chars[i].is_alphabetic() && starts_word {
                let start = i;
                while i < chars.len() && chars[i].is_alphabetic() {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect::<String>().to_lowercase();
                if NUMBER_WORDS.contains(&word.as_str()) {
                    found.push(Stated {
                        number: word,
                        after: chars[i..].iter().collect::<String>().trim_start().into(),
                    });
                }
                continue;
            }
            i += 1;
        }
    }
    found
}

/// Whether `after` starts with the words `unit` (a whole word: `s` is not the start of `spin`).
fn follows(after: &str, unit: &str) -> bool {
    after
        .strip_prefix(unit)
        .is_some_and(|rest| rest.chars().next().is_none_or(|c| !c.is_alphanumeric()))
}

/// What is wrong between the numbers `stated` and [`FIGURES`]: each number must be in digits,
/// followed by one figure's unit and equal to its value, and each figure must be stated.
pub fn mismatches(stated: &[Stated]) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut matched = vec![false; FIGURES.len()];
    for number in stated {
        let Ok(value) = number.number.parse::<f64>() else {
            wrong.push(format!(
                "{:?} {:?}: write figures in digits, each the value of a constant of \
                 tests/src/promises/figures.rs",
                number.number, number.after
            ));
            continue;
        };
        let figure = FIGURES
            .iter()
            .enumerate()
            .filter(|(_, f)| follows(&number.after, f.unit))
            .max_by_key(|(_, f)| f.unit.len());
        match figure {
            None => wrong.push(format!(
                "{} {:?}: no constant of tests/src/promises/figures.rs stands for this number \
                 (FIGURES has none with this unit)",
                number.number, number.after
            )),
            Some((index, figure)) => {
                matched[index] = true;
                if (figure.value - value).abs() > f64::EPSILON * figure.value.abs().max(1.0) {
                    wrong.push(format!(
                        "README says {} {}, the check holds {} = {}",
                        number.number, figure.unit, figure.name, figure.value
                    ));
                }
            }
        }
    }
    for (figure, seen) in FIGURES.iter().zip(matched) {
        if !seen {
            wrong.push(format!(
                "{} = {} ({}) is not stated in README's promise list",
                figure.name, figure.value, figure.unit
            ));
        }
    }
    wrong
}

/// The numbers of README's promise list.
pub fn stated_figures() -> Vec<Stated> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("reading README.md");
    numbers_in(&section_prose(&readme, PROMISES_SECTION))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_of_readmes_promise_list_is_a_constant_of_the_checks() {
        let stated = stated_figures();
        assert!(
            !stated.is_empty(),
            "README has no section {PROMISES_SECTION:?}, or it states no figure"
        );
        let wrong = mismatches(&stated);
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn numbers_are_read_with_what_follows_them() {
        let text = "# A\n\n1 here\n\n## Promises\n\n- 5 rolls and\n  0.1 % of a core;\n- \
                    `code 7` and [link 8](x9.md) seven\n\n## B\n\n3 there\n";
        let found = numbers_in(&section_prose(text, "Promises"));
        let numbers: Vec<&str> = found.iter().map(|s| s.number.as_str()).collect();
        assert_eq!(numbers, ["5", "0.1", "8", "seven"]);
        assert_eq!(found[0].after, "rolls and 0.1 % of a core;");
        assert!(follows("s each", "s") && follows("s", "s") && !follows("spins", "s"));
        assert_eq!(found[1].after, "% of a core;");
    }

    #[test]
    fn a_wrong_missing_or_unknown_figure_is_named() {
        let stated = |number: &str, after: &str| Stated {
            number: number.into(),
            after: after.into(),
        };
        let all = [
            stated("5", "rolls"),
            stated("0.1", "% of a core"),
            stated("10", "wake-ups a second"),
            stated("3", "windows of 10 s each"),
            stated("10", "s each"),
        ];
        assert_eq!(mismatches(&all), Vec::<String>::new());
        let mut wrong = all.to_vec();
        wrong[1] = stated("0.5", "% of a core");
        assert!(mismatches(&wrong)[0].contains("IDLE_CORE_PERCENT = 0.1"));
        let mut unknown = all.to_vec();
        unknown.push(stated("42", "requests"));
        assert!(mismatches(&unknown)[0].contains("no constant"));
        let missing = &all[1..];
        assert!(mismatches(missing)[0].contains("ROLLS = 5"));
        let spelled = [stated("five", "rolls")];
        assert!(mismatches(&spelled)[0].contains("digits"));
    }
}
