//! Where each document of a YAML text lies, and in a List document where each item and each
//! other field lies, found in one pass of libyaml's event parser that keeps nothing but those
//! positions. `kubectl get -o yaml` prints a cluster as one List document, and the YAML
//! deserializer loads every event of a document before reading any of it: ~15x the text for a
//! List. With the outline, a List's items are read one at a time from their own text.
//!
//! A node is read alone from the text between its first and last event, with what precedes it
//! on its first line (`- `, `key: `) blanked so that every line keeps its column. That reads the
//! same as the node in place when nothing in it refers outside it: the outline is refused (and
//! the text read whole) when a document has anchors, aliases, tags or directives, a List that
//! is not block style, or nesting deep enough to meet the deserializer's limit.

use std::mem::MaybeUninit;
use std::ops::Range;

use libyaml_rs as sys;

/// Deepest collection nesting an outlined document may have: the deserializer refuses 128
/// levels counted from the document's root, and an item read alone would start counting at its
/// own root.
const MOST_NESTING: usize = 100;

/// Longest top-level key an outlined List may have (kubectl's are `apiVersion`, `items`, `kind`
/// and `metadata`).
const MOST_KEY_BYTES: usize = 64;

/// One document of the text.
#[derive(Debug, PartialEq)]
pub(super) enum DocumentOutline {
    /// A document read whole: its text.
    Whole(Range<usize>),
    /// A block mapping whose `items` is a block sequence.
    List {
        /// The other fields, in order: key and value.
        fields: Vec<(String, NodeText)>,
        items: Vec<NodeText>,
    },
}

/// Where one node's text is: from `start` to `end`, read with what precedes it on its line,
/// from `line`, as spaces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct NodeText {
    line: usize,
    start: usize,
    end: usize,
}

impl NodeText {
    /// The node as a YAML text of its own.
    pub(super) fn text(&self, text: &str) -> String {
        let blanked = text[self.line..self.start].chars().count();
        let node = &text[self.start..self.end];
        let mut own = String::with_capacity(blanked + node.len());
        own.extend(std::iter::repeat_n(' ', blanked));
        own.push_str(node);
        own
    }
}

/// The outline of every document of `text`, or `None` when the text must be read whole: it
/// is not valid YAML (the deserializer then names the error), or an outlined node might not
/// read alone as it does in place (see the module's documentation).
pub(super) fn outline(text: &str) -> Option<Vec<DocumentOutline>> {
    // A pass for nothing over a text of one object per document, which is read as fast whole:
    // a List outlined has `items:` at the start of a line.
    if !(text.starts_with("items:") || text.contains("\nitems:")) {
        return None;
    }
    let mut parser = Parser::new(text)?;
    let mut documents = Vec::new();
    loop {
        match parser.next()? {
            Event::StreamStart => {}
            Event::StreamEnd => return Some(documents),
            Event::DocumentStart { start, directives } => {
                if directives {
                    return None;
                }
                documents.push(document(&mut parser, text, start)?);
            }
            _ => return None,
        }
    }
}

/// The rest of a document after its start: a List outlined, or else the document's text.
fn document(parser: &mut Parser<'_>, text: &str, start: usize) -> Option<DocumentOutline> {
    if let Some(list) = list(parser, text) {
        let Event::DocumentEnd { .. } = parser.next()? else {
            return None;
        };
        return Some(list);
    }
    if parser.failed {
        return None;
    }
    // Not a List, or one that cannot be outlined: the rest of the document is passed over.
    loop {
        if let Event::DocumentEnd { end } = parser.next()? {
            return Some(DocumentOutline::Whole(start..end));
        }
    }
}

/// A document's root read as a List up to the end of its mapping; `None` (part of it read)
/// when it is not a block mapping with a block sequence `items`, or cannot be outlined.
fn list(parser: &mut Parser<'_>, text: &str) -> Option<DocumentOutline> {
    let Event::MappingStart {
        block: true,
        plain: true,
        ..
    } = parser.next()?
    else {
        return None;
    };
    let mut fields = Vec::new();
    let mut items = None;
    loop {
        let (key_start, key_end, key) = match parser.next()? {
            Event::MappingEnd { .. } => break,
            Event::Scalar {
                start,
                end,
                value,
                plain: true,
                plain_style: true,
            } if is_simple_key(&value) => (start, end, value),
            _ => return None,
        };
        let first = parser.next()?;
        if key == "items" {
            let Event::SequenceStart {
                block: true,
                plain: true,
                ..
            } = first
            else {
                return None;
            };
            if items.is_some() {
                return None;
            }
            items = Some(list_items(parser, text)?);
            continue;
        }
        let value = field_value(parser, text, &first, key_start..key_end)?;
        fields.push((key, value));
    }
    Some(DocumentOutline::List {
        fields,
        items: items?,
    })
}

/// A key the deserializer reads as the same string, whatever its schema: a plain scalar of
/// letters, digits and `-_./` that does not start with a digit or sign and is not a YAML word.
fn is_simple_key(key: &str) -> bool {
    let Some(first) = key.chars().next() else {
        return false;
    };
    first.is_ascii_alphabetic()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && !matches!(
            key.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n" | "nan" | "inf"
        )
}

/// Each item of `items`, a block sequence whose start was read.
fn list_items(parser: &mut Parser<'_>, text: &str) -> Option<Vec<NodeText>> {
    let mut items = Vec::new();
    loop {
        let first = parser.next()?;
        if let Event::SequenceEnd { .. } = first {
            return Some(items);
        }
        let start = first.start()?;
        let end = skip_node(parser, &first, 1)?;
        let line = line_start(text, start);
        // Only the item's indent and `-` indicators may precede it on its line.
        let before = &text[line..start];
        if !before.bytes().all(|b| matches!(b, b' ' | b'-')) {
            return None;
        }
        items.push(NodeText { line, start, end });
    }
}

/// A top-level field's value whose first event was read; `key` is where its key is.
fn field_value(
    parser: &mut Parser<'_>,
    text: &str,
    first: &Event,
    key: Range<usize>,
) -> Option<NodeText> {
    let start = first.start()?;
    let end = skip_node(parser, first, 1)?;
    let line = line_start(text, start);
    let before = &text[line..start];
    if line <= key.start {
        // On the key's line: only the key's indent, the key and `:` may precede it.
        let indent = &text[line..key.start];
        let between = text[key.end..start].trim();
        if !indent.bytes().all(|b| b == b' ') || between != ":" {
            return None;
        }
    } else if !before.bytes().all(|b| b == b' ') {
        return None;
    }
    Some(NodeText { line, start, end })
}

/// Reads the rest of the node `first` starts (nested `depth` deep) and returns its end; `None`
/// for anything that refers outside the node (an anchor, alias or tag) or nests too deep.
fn skip_node(parser: &mut Parser<'_>, first: &Event, depth: usize) -> Option<usize> {
    let mut open = 0;
    let mut end = node_event(first, &mut open, depth)?;
    while open > 0 {
        let event = parser.next()?;
        end = node_event(&event, &mut open, depth)?;
    }
    Some(end)
}

/// One event of a node: where it ends, with `open` counting the collections it is inside.
fn node_event(event: &Event, open: &mut usize, depth: usize) -> Option<usize> {
    match *event {
        Event::Scalar {
            plain: true, end, ..
        } => Some(end),
        Event::SequenceStart {
            plain: true, end, ..
        }
        | Event::MappingStart {
            plain: true, end, ..
        } => {
            *open += 1;
            (depth + *open <= MOST_NESTING).then_some(end)
        }
        Event::SequenceEnd { end } | Event::MappingEnd { end } => {
            *open = open.checked_sub(1)?;
            Some(end)
        }
        _ => None,
    }
}

/// Where the line holding `offset` starts.
fn line_start(text: &str, offset: usize) -> usize {
    text[..offset].rfind('\n').map_or(0, |newline| newline + 1)
}

/// What the outline needs of one libyaml event. `plain`: no anchor and no tag.
enum Event {
    StreamStart,
    StreamEnd,
    DocumentStart {
        start: usize,
        directives: bool,
    },
    DocumentEnd {
        end: usize,
    },
    Scalar {
        start: usize,
        end: usize,
        value: String,
        plain: bool,
        /// Written without quotes or block indicator.
        plain_style: bool,
    },
    SequenceStart {
        start: usize,
        end: usize,
        block: bool,
        plain: bool,
    },
    SequenceEnd {
        end: usize,
    },
    MappingStart {
        start: usize,
        end: usize,
        block: bool,
        plain: bool,
    },
    MappingEnd {
        end: usize,
    },
    /// An alias, or an event libyaml added after this was written.
    Other,
}

impl Event {
    /// Where a node's first event starts.
    fn start(&self) -> Option<usize> {
        match self {
            Event::Scalar { start, .. }
            | Event::SequenceStart { start, .. }
            | Event::MappingStart { start, .. } => Some(*start),
            _ => None,
        }
    }
}

/// libyaml's event parser over a borrowed text.
struct Parser<'t> {
    sys: Box<MaybeUninit<sys::yaml_parser_t>>,
    failed: bool,
    text: std::marker::PhantomData<&'t str>,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Option<Parser<'t>> {
        let mut sys = Box::new(MaybeUninit::<sys::yaml_parser_t>::uninit());
        // SAFETY: libyaml initializes the parser in place, and reads the text through the
        // pointer it is given for as long as the parser lives, which `'t` bounds.
        unsafe {
            let parser = sys.as_mut_ptr();
            if sys::yaml_parser_initialize(parser).fail {
                return None;
            }
            sys::yaml_parser_set_encoding(parser, sys::YAML_UTF8_ENCODING);
            sys::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as u64);
        }
        Some(Parser {
            sys,
            failed: false,
            text: std::marker::PhantomData,
        })
    }

    /// The next event; `None` once the text is not valid YAML.
    fn next(&mut self) -> Option<Event> {
        if self.failed {
            return None;
        }
        let mut raw = MaybeUninit::<sys::yaml_event_t>::uninit();
        // SAFETY: the parser was initialized in `new`; an event libyaml filled is read through
        // the union member its type names, then deleted.
        unsafe {
            let parser = self.sys.as_mut_ptr();
            if sys::yaml_parser_parse(parser, raw.as_mut_ptr()).fail {
                self.failed = true;
                return None;
            }
            let raw = raw.assume_init_mut();
            let event = convert(raw);
            sys::yaml_event_delete(raw);
            Some(event)
        }
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`, deleted once.
        unsafe { sys::yaml_parser_delete(self.sys.as_mut_ptr()) }
    }
}

/// # Safety
/// `raw` is an event `yaml_parser_parse` filled.
unsafe fn convert(raw: &sys::yaml_event_t) -> Event {
    let start = raw.start_mark.index as usize;
    let end = raw.end_mark.index as usize;
    // SAFETY (each union read): the member is the one the event's type names.
    unsafe {
        match raw.type_ {
            sys::YAML_STREAM_START_EVENT => Event::StreamStart,
            sys::YAML_STREAM_END_EVENT => Event::StreamEnd,
            sys::YAML_DOCUMENT_START_EVENT => {
                let data = raw.data.document_start;
                Event::DocumentStart {
                    start,
                    directives: !data.version_directive.is_null()
                        || data.tag_directives.start != data.tag_directives.end,
                }
            }
            sys::YAML_DOCUMENT_END_EVENT => Event::DocumentEnd { end },
            sys::YAML_SCALAR_EVENT => {
                let data = raw.data.scalar;
                // Only keys are read, and a longer one is not simple: most scalars are values.
                let length = data.length as usize;
                let value = match length <= MOST_KEY_BYTES {
                    true => String::from_utf8_lossy(std::slice::from_raw_parts(data.value, length))
                        .into_owned(),
                    false => String::new(),
                };
                Event::Scalar {
                    start,
                    end,
                    value,
                    plain: data.anchor.is_null() && data.tag.is_null(),
                    plain_style: data.style == sys::YAML_PLAIN_SCALAR_STYLE,
                }
            }
            sys::YAML_SEQUENCE_START_EVENT => {
                let data = raw.data.sequence_start;
                Event::SequenceStart {
                    start,
                    end,
                    block: data.style == sys::YAML_BLOCK_SEQUENCE_STYLE,
                    plain: data.anchor.is_null() && data.tag.is_null(),
                }
            }
            sys::YAML_SEQUENCE_END_EVENT => Event::SequenceEnd { end },
            sys::YAML_MAPPING_START_EVENT => {
                let data = raw.data.mapping_start;
                Event::MappingStart {
                    start,
                    end,
                    block: data.style == sys::YAML_BLOCK_MAPPING_STYLE,
                    plain: data.anchor.is_null() && data.tag.is_null(),
                }
            }
            sys::YAML_MAPPING_END_EVENT => Event::MappingEnd { end },
            _ => Event::Other,
        }
    }
}
