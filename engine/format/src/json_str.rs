//! A JSON string literal: shown in a message, read, and written byte for byte as
//! `serde_json` writes it, sixteen bytes at a time.
//!
//! The sink's TEXT columns are mostly long runs that need no escape (a profile of the
//! subscription -> topic benchmark put `serde_json`'s byte-at-a-time escaping at 14% of
//! the pipeline's CPU for 1 KiB strings); runs are found 16 bytes at a time with SSE2 on
//! x86-64 (3.5 instructions per byte a word at a time, about 1 with SSE2: decision 0049),
//! a 64-bit word at a time elsewhere, and copied whole.

use std::borrow::Cow;

/// Most characters of an offending value quoted in a message.
const SHOW_CHARS: usize = 100;

/// `raw` for a message: cut to about 100 characters.
pub(crate) fn show(raw: &str) -> Cow<'_, str> {
    match raw.char_indices().nth(SHOW_CHARS) {
        Some((at, _)) => Cow::Owned(format!("{}... ({} bytes)", &raw[..at], raw.len())),
        None => Cow::Borrowed(raw),
    }
}

/// The contents of the JSON string literal `raw`, borrowed unless it has escapes.
pub(crate) fn json_string(raw: &str) -> Result<Cow<'_, str>, String> {
    let inner = &raw[1..raw.len() - 1];
    if memchr::memchr(b'\\', inner.as_bytes()).is_none() {
        // serde_json already refused control characters and checked UTF-8.
        return Ok(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(raw)
        .map(Cow::Owned)
        .map_err(|e| format!("{} is not a valid JSON string: {e}", show(raw)))
}

/// Each byte of a word set to `b`.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// Whether any byte of `w` is below 0x20 or is `"` or `\`: the bytes JSON must escape.
/// Exact for the whole word (the borrow tricks can misplace a flag, never invent one).
fn needs_escape(w: u64) -> bool {
    let high = splat(0x80);
    let zero_byte = |v: u64| v.wrapping_sub(splat(0x01)) & !v & high;
    let control = w.wrapping_sub(splat(0x20)) & !w & high;
    (control | zero_byte(w ^ splat(b'"')) | zero_byte(w ^ splat(b'\\'))) != 0
}

/// The index of the first byte from `i` on that may need an escape (or `b.len()`): SSE2
/// blocks of 16 (every x86-64 CPU has SSE2), then words of 8. A returned byte may need
/// none (a word's flag is exact for the word, not the byte); the caller checks it.
fn skip_clean(b: &[u8], mut i: usize) -> usize {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
            _mm_or_si128, _mm_set1_epi8,
        };
        // SAFETY: compiled only where SSE2 is enabled (the x86-64 baseline), so these
        // intrinsics are available; each load reads the 16 bytes b[i..i + 16], which the loop condition
        // keeps inside `b`, and `_mm_loadu_si128` needs no alignment.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let below_space = _mm_set1_epi8(0x1f);
            while i + 16 <= b.len() {
                let v = _mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>());
                // v <= 0x1f (unsigned) exactly where min(v, 0x1f) == v.
                let control = _mm_cmpeq_epi8(_mm_min_epu8(v, below_space), v);
                let special = _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash));
                let mask = _mm_movemask_epi8(_mm_or_si128(control, special)) as u32;
                if mask != 0 {
                    return i + mask.trailing_zeros() as usize;
                }
                i += 16;
            }
        }
    }
    while let Some(chunk) = b.get(i..i + 8) {
        if needs_escape(u64::from_ne_bytes(chunk.try_into().expect("8 bytes"))) {
            break;
        }
        i += 8;
    }
    i
}

/// Appends `s` as a JSON string literal (quotes included): `"` and `\` escaped with a
/// backslash, `\b \f \n \r \t` in short form, other control characters as `\u00xx`;
/// everything else, non-ASCII included, as is.
pub(crate) fn write_json_str(s: &str, out: &mut Vec<u8>) {
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
    let mut clean = 0; // start of the run not yet copied
    let mut i = 0;
    while i < b.len() {
        i = skip_clean(b, i);
        let Some(&c) = b.get(i) else { break };
        let short = match c {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x0c => b'f',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x00..=0x1f => b'u',
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&b[clean..i]);
        out.push(b'\\');
        out.push(short);
        if short == b'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'0',
                b'0',
                HEX[usize::from(c >> 4)],
                HEX[usize::from(c & 0xf)],
            ]);
        }
        i += 1;
        clean = i;
    }
    out.extend_from_slice(&b[clean..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Vec<u8> {
        let mut v = Vec::new();
        write_json_str(s, &mut v);
        v
    }

    #[test]
    fn escapes_as_serde_json_does() {
        for s in [
            "",
            "plain",
            "exactly8",
            "a\"b\\c",
            "\u{0}\u{1f}\u{7f}\n\r\t\u{8}\u{c}",
            "é 日本 🎉 and then a long tail with no escapes at all, past several words",
            "\"\"\"\"\"\"\"\"\"",
        ] {
            assert_eq!(text(s), serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }

    proptest::proptest! {
        /// Every string, at every alignment of its escapes to the 16-byte blocks and the
        /// 8-byte words, writes the bytes serde_json writes (the reader's own JSON library
        /// reads them back).
        #[test]
        fn every_string_writes_as_serde_json_writes_it(
            s in "(\\PC|[\u{0}-\u{1f}\"\\\\\u{7f}]){0,80}",
            pad in 0usize..16,
        ) {
            let s = format!("{}{s}", "x".repeat(pad));
            proptest::prop_assert_eq!(text(&s), serde_json::to_vec(&s).unwrap());
        }

        /// Long runs with an escape now and then (the blocks' fast path, then the byte
        /// the mask names), non-ASCII included.
        #[test]
        fn long_runs_with_rare_escapes_write_as_serde_json_writes_them(
            parts in proptest::collection::vec(("[a-zé日]{0,40}", "[\u{0}-\u{1f}\"\\\\]"), 0..6),
        ) {
            let s: String = parts.iter().map(|(run, esc)| format!("{run}{esc}")).collect();
            proptest::prop_assert_eq!(text(&s), serde_json::to_vec(&s).unwrap());
        }
    }
}
