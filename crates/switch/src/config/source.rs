//! Where things are in the configuration text: key paths ↔ byte spans ↔ line:column,
//! so every error names the file, the position and the key the user wrote.

use std::fmt;
use std::ops::Range;

use toml_edit::{Document, Item, Table, Value};

/// One problem found in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    /// 1-based; 0 for problems with no position (command-line overrides).
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    /// Dotted key path such as `dialplan.contexts.default.rules[2].steps[1]`; empty for syntax errors.
    pub key: String,
    pub message: String,
    /// Warnings do not stop the configuration from loading.
    pub warning: bool,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        f.write_str(": ")?;
        if self.warning {
            f.write_str("warning: ")?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Collects errors and warnings against one parsed file.
pub(crate) struct Diagnostics<'a> {
    file: &'a str,
    text: &'a str,
    /// `(key path, key span, value span)` for every key and array element.
    spans: Spans,
    pub(crate) found: Vec<ConfigError>,
}

impl<'a> Diagnostics<'a> {
    pub(crate) fn new(file: &'a str, text: &'a str, doc: &Document<&str>) -> Diagnostics<'a> {
        let mut spans = Vec::new();
        index(doc.as_item(), String::new(), &mut spans);
        Diagnostics {
            file,
            text,
            spans,
            found: Vec::new(),
        }
    }

    /// An error about the value at `key`.
    pub(crate) fn error(&mut self, key: &str, message: impl fmt::Display) {
        self.at(key, 0, message, false);
    }

    /// A problem `offset` bytes into the string value at `key`: the column points
    /// there when the string is quoted without escapes, else at the value itself.
    pub(crate) fn at(
        &mut self,
        key: &str,
        offset: usize,
        message: impl fmt::Display,
        warning: bool,
    ) {
        let start = self.value_span(key).map_or(0, |span| {
            let raw = &self.text[span.clone()];
            let single_line = raw.starts_with(['"', '\''])
                && !raw.starts_with("\"\"\"")
                && !raw.starts_with("'''");
            if offset > 0 && single_line && !raw.contains('\\') && offset < raw.len() - 1 {
                span.start + 1 + offset
            } else {
                span.start
            }
        });
        let (line, column) = line_column(self.text, start);
        self.found.push(ConfigError {
            file: self.file.to_owned(),
            line,
            column,
            key: key.to_owned(),
            message: message.to_string(),
            warning,
        });
    }

    /// A serde error: the key is the innermost one whose text contains the span.
    pub(crate) fn serde(&mut self, span: Option<Range<usize>>, message: &str) {
        let start = span.map_or(0, |s| s.start);
        let key = self
            .spans
            .iter()
            .filter(|(_, key, value)| {
                key.as_ref().is_some_and(|k| k.contains(&start)) || value.contains(&start)
            })
            .map(|(path, ..)| path.as_str())
            .max_by_key(|path| path.len())
            .unwrap_or_default()
            .to_owned();
        let (line, column) = line_column(self.text, start);
        self.found.push(ConfigError {
            file: self.file.to_owned(),
            line,
            column,
            key,
            message: message.to_owned(),
            warning: false,
        });
    }

    fn value_span(&self, key: &str) -> Option<Range<usize>> {
        self.spans
            .iter()
            .find(|(path, ..)| path == key)
            .map(|(_, key_span, value)| {
                if value.is_empty() {
                    key_span.clone()
                } else {
                    Some(value.clone())
                }
            })?
    }
}

/// A syntax error, before any key is known.
pub(crate) fn syntax_error(
    file: &str,
    text: &str,
    span: Option<Range<usize>>,
    message: &str,
) -> ConfigError {
    let (line, column) = line_column(text, span.map_or(0, |s| s.start));
    ConfigError {
        file: file.to_owned(),
        line,
        column,
        key: String::new(),
        message: message.trim_end().to_owned(),
        warning: false,
    }
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

type Spans = Vec<(String, Option<Range<usize>>, Range<usize>)>;

fn index(item: &Item, path: String, out: &mut Spans) {
    match item {
        Item::Table(table) => index_table(table, &path, out),
        Item::ArrayOfTables(array) => {
            for (i, table) in array.iter().enumerate() {
                let child_path = format!("{path}[{i}]");
                out.push((child_path.clone(), None, table.span().unwrap_or_default()));
                index_table(table, &child_path, out);
            }
        }
        Item::Value(value) => index_value(value, &path, out),
        Item::None => {}
    }
}

fn index_table(table: &Table, path: &str, out: &mut Spans) {
    for (key, child) in table.iter() {
        let key_span = table.key(key).and_then(|k| k.span());
        let child_path = join(path, key);
        out.push((
            child_path.clone(),
            key_span,
            child.span().unwrap_or_default(),
        ));
        index(child, child_path, out);
    }
}

fn index_value(value: &Value, path: &str, out: &mut Spans) {
    match value {
        Value::Array(array) => {
            for (i, element) in array.iter().enumerate() {
                let child_path = format!("{path}[{i}]");
                out.push((child_path.clone(), None, element.span().unwrap_or_default()));
                index_value(element, &child_path, out);
            }
        }
        Value::InlineTable(table) => {
            for (key, child) in table.iter() {
                let key_span = table.key(key).and_then(|k| k.span());
                let child_path = join(path, key);
                out.push((
                    child_path.clone(),
                    key_span,
                    child.span().unwrap_or_default(),
                ));
                index_value(child, &child_path, out);
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}
