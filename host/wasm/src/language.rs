//! The source language of a component, read from what its toolchain left in it: the `producers`
//! custom sections (of the component and of its core modules) and, for Python, the interpreter
//! library componentize-py links in.

/// The language a component was written in, when its toolchain says so: `Rust`, `C`, `C++`,
/// `Go`, `JavaScript`, `Python`, or the `language` value a toolchain records as it is.
pub fn language(component: &[u8]) -> Option<String> {
    if !component.starts_with(b"\0asm") {
        return None;
    }
    let mut found = Producers::default();
    // A damaged section ends the walk; what was read before it still counts.
    let _ = walk(component, 0, &mut found);
    // A component-level language names what the guest was written in (componentize-js says
    // JavaScript there); its core modules' languages include the runtime's (C, C++, Rust).
    if let Some(top) = found.top_languages.first() {
        return Some(top.clone());
    }
    let processed = |tool: &str| found.processed_by.iter().any(|p| p == tool);
    if processed("ComponentizeJS") || processed("componentize-js") {
        return Some("JavaScript".into());
    }
    if processed("componentize-py") || contains(component, b"libpython3") {
        return Some("Python".into());
    }
    let has = |prefix: &str| found.languages.iter().any(|l| l.starts_with(prefix));
    // Rust's standard library for WASI links C (wasi-libc): Rust wins over C.
    let named = if has("Rust") {
        "Rust"
    } else if has("TinyGo") || has("Go") {
        "Go"
    } else if has("C_plus_plus") {
        "C++"
    } else if has("C") {
        "C"
    } else if let Some(first) = found.languages.first() {
        return Some(first.clone());
    } else if processed("wit-bindgen-c") {
        // Older clangs record no language; the C bindings generator gives it away.
        "C"
    } else if processed("wit-bindgen-go") {
        "Go"
    } else {
        return None;
    };
    Some(named.into())
}

#[derive(Default)]
struct Producers {
    /// `language` values of the outermost component.
    top_languages: Vec<String>,
    /// `language` values anywhere inside.
    languages: Vec<String>,
    /// `processed-by` tool names anywhere.
    processed_by: Vec<String>,
}

/// Reads the sections of a module or component (`depth` 0 the outermost), descending into nested
/// core modules and components. `None` for bytes that are not WebAssembly.
fn walk(bytes: &[u8], depth: usize, found: &mut Producers) -> Option<()> {
    const MAX_DEPTH: usize = 8;
    if bytes.get(..4)? != b"\0asm" || depth > MAX_DEPTH {
        return None;
    }
    // Components have a version/layer word other than a core module's 1.
    let component = bytes.get(4..8)? != [1, 0, 0, 0];
    let mut at = 8;
    while at < bytes.len() {
        let id = bytes[at];
        let (size, start) = leb128(bytes, at + 1)?;
        let payload = bytes.get(start..start.checked_add(size)?)?;
        at = start + size;
        match id {
            0 => read_custom(payload, depth, found),
            // A component's core module (1) and nested component (4) sections.
            1 | 4 if component => {
                let _ = walk(payload, depth + 1, found);
            }
            _ => {}
        }
    }
    Some(())
}

fn read_custom(payload: &[u8], depth: usize, found: &mut Producers) {
    let Some((name, mut at)) = string(payload, 0) else {
        return;
    };
    if name != "producers" {
        return;
    }
    let Some((fields, next)) = leb128(payload, at) else {
        return;
    };
    at = next;
    for _ in 0..fields {
        let Some((field, next)) = string(payload, at) else {
            return;
        };
        let Some((values, next)) = leb128(payload, next) else {
            return;
        };
        at = next;
        for _ in 0..values {
            let Some((value, next)) = string(payload, at) else {
                return;
            };
            let Some((_version, next)) = string(payload, next) else {
                return;
            };
            at = next;
            let value = value.to_string();
            match field {
                "language" => {
                    if depth == 0 {
                        found.top_languages.push(value.clone());
                    }
                    found.languages.push(value);
                }
                "processed-by" => found.processed_by.push(value),
                _ => {}
            }
        }
    }
}

/// An unsigned LEB128 number at `at` and the position after it.
fn leb128(bytes: &[u8], mut at: usize) -> Option<(usize, usize)> {
    let mut value = 0usize;
    for shift in (0..35).step_by(7) {
        let byte = *bytes.get(at)?;
        at += 1;
        value |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((value, at));
        }
    }
    None
}

/// A length-prefixed UTF-8 name at `at` and the position after it.
fn string(bytes: &[u8], at: usize) -> Option<(&str, usize)> {
    let (len, start) = leb128(bytes, at)?;
    let end = start.checked_add(len)?;
    Some((std::str::from_utf8(bytes.get(start..end)?).ok()?, end))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module or component with one `producers` section holding `fields`.
    fn with_producers(
        header: [u8; 8],
        fields: &[(&str, &[&str])],
        nested: Option<Vec<u8>>,
    ) -> Vec<u8> {
        fn name(out: &mut Vec<u8>, text: &str) {
            out.push(text.len() as u8);
            out.extend_from_slice(text.as_bytes());
        }
        let mut custom = Vec::new();
        name(&mut custom, "producers");
        custom.push(fields.len() as u8);
        for (field, values) in fields {
            name(&mut custom, field);
            custom.push(values.len() as u8);
            for value in *values {
                name(&mut custom, value);
                name(&mut custom, "1.0");
            }
        }
        let mut out = header.to_vec();
        if let Some(module) = nested {
            out.push(1);
            out.push(module.len() as u8);
            out.extend(module);
        }
        out.push(0);
        out.push(custom.len() as u8);
        out.extend(custom);
        out
    }

    const MODULE: [u8; 8] = *b"\0asm\x01\0\0\0";
    const COMPONENT: [u8; 8] = *b"\0asm\x0d\0\x01\0";

    #[test]
    fn the_language_comes_from_the_producers_sections() {
        let rust = with_producers(MODULE, &[("language", &["Rust", "C11"])], None);
        let component = with_producers(
            COMPONENT,
            &[("processed-by", &["wit-component"])],
            Some(rust),
        );
        assert_eq!(language(&component).as_deref(), Some("Rust"));

        let c = with_producers(MODULE, &[("language", &["C11"])], None);
        let component = with_producers(COMPONENT, &[], Some(c.clone()));
        assert_eq!(language(&component).as_deref(), Some("C"));

        // componentize-js names JavaScript at the top; its engine's modules say C++ and Rust.
        let engine = with_producers(
            MODULE,
            &[("language", &["C11", "Rust", "C_plus_plus_14"])],
            None,
        );
        let js = with_producers(COMPONENT, &[("language", &["JavaScript"])], Some(engine));
        assert_eq!(language(&js).as_deref(), Some("JavaScript"));

        let mut python = with_producers(
            COMPONENT,
            &[("processed-by", &["component-init-transform"])],
            Some(c),
        );
        assert_eq!(language(&python).as_deref(), Some("C"));
        python.extend_from_slice(b"\0\x11\x10libpython3.14.so\0");
        assert_eq!(language(&python).as_deref(), Some("Python"));

        let old_clang = with_producers(MODULE, &[("processed-by", &["wit-bindgen-c"])], None);
        let component = with_producers(COMPONENT, &[], Some(old_clang));
        assert_eq!(language(&component).as_deref(), Some("C"));

        assert_eq!(language(&with_producers(COMPONENT, &[], None)), None);
        assert_eq!(language(b"not wasm"), None);
    }
}
