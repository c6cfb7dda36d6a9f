//! `wordcount`: the summary of a text, not the text, crosses to the client.

use std::collections::HashMap;

use labios_label::{Error, Result};
use serde::Serialize;

#[derive(Serialize)]
struct WordCount<'a> {
    bytes: usize,
    /// Like `wc -l`, plus one for a last line without a newline.
    lines: usize,
    /// Maximal runs of letters and digits (any script).
    words: u64,
    distinct: usize,
    /// The most frequent words, lowercased; ties in alphabetical order.
    top: Vec<Top<'a>>,
}

#[derive(Serialize)]
struct Top<'a> {
    word: &'a str,
    count: u64,
}

pub(crate) fn wordcount(input: &[u8], top: usize) -> Result<Vec<u8>> {
    let text = std::str::from_utf8(input).map_err(|e| {
        Error::Malformed(format!(
            "function wordcount: the input is not UTF-8 text (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut words = 0;
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        words += 1;
        // Most words are already lowercase: look them up without allocating.
        if let Some(count) = counts.get_mut(word) {
            *count += 1;
        } else {
            *counts.entry(word.to_lowercase()).or_default() += 1;
        }
    }
    let mut ranked: Vec<(&String, &u64)> = counts.iter().collect();
    ranked.sort_unstable_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    ranked.truncate(top);
    let newlines = input.iter().filter(|&&b| b == b'\n').count();
    let summary = WordCount {
        bytes: input.len(),
        lines: newlines + usize::from(input.last().is_some_and(|&b| b != b'\n')),
        words,
        distinct: counts.len(),
        top: ranked
            .into_iter()
            .map(|(word, &count)| Top { word, count })
            .collect(),
    };
    serde_json::to_vec(&summary).map_err(|e| Error::Storage(format!("cannot encode JSON: {e}")))
}
