//! A certificate's subject as text: its distinguished name in the string form of RFC 4514
//! (`CN=alice,O=Example`, the last RDN first), read from the certificate's DER.

/// Why a certificate's subject cannot be named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    #[error("the certificate is not DER that holds a subject")]
    Malformed,
    #[error("the certificate's subject is empty")]
    Empty,
}

/// The subject of `certificate` (DER), as RFC 4514 writes a distinguished name. Known
/// attribute types by their short names (CN, O, OU, …), others by their dotted OID; string
/// values escaped as RFC 4514 asks (and control characters as `\XX`), other values as `#` and
/// the hex of their DER.
pub fn subject_of(certificate: &[u8]) -> Result<String, SubjectError> {
    let certificate = Der(certificate).only(SEQUENCE)?;
    let mut tbs = Der(Der(certificate).next_of(SEQUENCE)?);
    // version [0] (optional), serialNumber, signature, issuer, validity, subject.
    if tbs.peek() == Some(VERSION) {
        tbs.next()?;
    }
    for tag in [INTEGER, SEQUENCE, SEQUENCE, SEQUENCE] {
        tbs.next_of(tag)?;
    }
    let mut names = Der(tbs.next_of(SEQUENCE)?);
    let mut rdns = Vec::new();
    while !names.is_empty() {
        let mut set = Der(names.next_of(SET)?);
        let mut attributes = Vec::new();
        while !set.is_empty() {
            let mut attribute = Der(set.next_of(SEQUENCE)?);
            let oid = attribute.next_of(OID)?;
            let (tag, value, encoded) = attribute.next_whole()?;
            if !attribute.is_empty() {
                return Err(SubjectError::Malformed);
            }
            attributes.push(format!(
                "{}={}",
                attribute_type(oid)?,
                attribute_value(tag, value, encoded)?
            ));
        }
        if attributes.is_empty() {
            return Err(SubjectError::Malformed);
        }
        rdns.push(attributes.join("+"));
    }
    if rdns.is_empty() {
        return Err(SubjectError::Empty);
    }
    rdns.reverse();
    Ok(rdns.join(","))
}

const INTEGER: u8 = 0x02;
const OID: u8 = 0x06;
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const VERSION: u8 = 0xa0;

/// DER read one element at a time: definite lengths only, up to four length bytes.
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn peek(&self) -> Option<u8> {
        self.0.first().copied()
    }

    /// The next element: its tag, its contents and its whole encoding.
    fn next_whole(&mut self) -> Result<(u8, &'a [u8], &'a [u8]), SubjectError> {
        let bytes = self.0;
        let (&tag, rest) = bytes.split_first().ok_or(SubjectError::Malformed)?;
        if tag & 0x1f == 0x1f {
            return Err(SubjectError::Malformed); // high tag numbers: none in a Name
        }
        let (&first, rest) = rest.split_first().ok_or(SubjectError::Malformed)?;
        let (length, rest) = match first {
            0..=0x7f => (usize::from(first), rest),
            0x81..=0x84 => {
                let count = usize::from(first & 0x7f);
                if rest.len() < count {
                    return Err(SubjectError::Malformed);
                }
                let (digits, rest) = rest.split_at(count);
                let length = digits
                    .iter()
                    .fold(0usize, |length, &digit| (length << 8) | usize::from(digit));
                (length, rest)
            }
            _ => return Err(SubjectError::Malformed),
        };
        if rest.len() < length {
            return Err(SubjectError::Malformed);
        }
        let header = bytes.len() - rest.len();
        self.0 = &rest[length..];
        Ok((tag, &rest[..length], &bytes[..header + length]))
    }

    fn next(&mut self) -> Result<(u8, &'a [u8]), SubjectError> {
        self.next_whole().map(|(tag, contents, _)| (tag, contents))
    }

    /// The contents of the next element, which must have `tag`.
    fn next_of(&mut self, tag: u8) -> Result<&'a [u8], SubjectError> {
        match self.next()? {
            (found, contents) if found == tag => Ok(contents),
            _ => Err(SubjectError::Malformed),
        }
    }

    /// The contents of the one element this holds, which must have `tag`.
    fn only(mut self, tag: u8) -> Result<&'a [u8], SubjectError> {
        let contents = self.next_of(tag)?;
        match self.is_empty() {
            true => Ok(contents),
            false => Err(SubjectError::Malformed),
        }
    }
}

/// An attribute type's short name (RFC 4514 §3, and those RFC 4519 adds that certificates
/// use), or its dotted OID.
fn attribute_type(oid: &[u8]) -> Result<String, SubjectError> {
    let dotted = dotted(oid)?;
    let short = match dotted.as_str() {
        "2.5.4.3" => "CN",
        "2.5.4.5" => "serialNumber",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        _ => return Ok(dotted),
    };
    Ok(short.to_owned())
}

/// An OID's arcs, dotted.
fn dotted(oid: &[u8]) -> Result<String, SubjectError> {
    let mut arcs: Vec<u64> = Vec::new();
    let mut arc: u64 = 0;
    for (i, &byte) in oid.iter().enumerate() {
        if arc == 0 && byte == 0x80 {
            return Err(SubjectError::Malformed); // not minimal
        }
        arc = arc
            .checked_mul(128)
            .ok_or(SubjectError::Malformed)?
            .saturating_add(u64::from(byte & 0x7f));
        if byte & 0x80 == 0 {
            if arcs.is_empty() {
                // The first subidentifier holds the first two arcs.
                let first = (arc / 40).min(2);
                arcs.extend([first, arc - first * 40]);
            } else {
                arcs.push(arc);
            }
            arc = 0;
        } else if i + 1 == oid.len() {
            return Err(SubjectError::Malformed); // cut in the middle of an arc
        }
    }
    if arcs.is_empty() {
        return Err(SubjectError::Malformed);
    }
    Ok(arcs
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join("."))
}

/// An attribute's value: a string escaped as RFC 4514 §2.4 asks, or `#` and the hex of its
/// whole encoding for a type that is no string.
fn attribute_value(tag: u8, value: &[u8], encoded: &[u8]) -> Result<String, SubjectError> {
    let text: String = match tag {
        // UTF8String, PrintableString, IA5String, VisibleString, NumericString
        0x0c | 0x13 | 0x16 | 0x1a | 0x12 => std::str::from_utf8(value)
            .map_err(|_| SubjectError::Malformed)?
            .to_owned(),
        // TeletexString, read as Latin-1 as most software does
        0x14 => value.iter().map(|&b| char::from(b)).collect(),
        // BMPString: UTF-16, big-endian
        0x1e => {
            if value.len() % 2 != 0 {
                return Err(SubjectError::Malformed);
            }
            let units = value.chunks(2).map(|p| u16::from_be_bytes([p[0], p[1]]));
            char::decode_utf16(units)
                .collect::<Result<_, _>>()
                .map_err(|_| SubjectError::Malformed)?
        }
        // UniversalString: UTF-32, big-endian
        0x1c => {
            if value.len() % 4 != 0 {
                return Err(SubjectError::Malformed);
            }
            value
                .chunks(4)
                .map(|q| char::from_u32(u32::from_be_bytes([q[0], q[1], q[2], q[3]])))
                .collect::<Option<_>>()
                .ok_or(SubjectError::Malformed)?
        }
        _ => return Ok(format!("#{}", crate::base::ids::hex(encoded))),
    };
    Ok(escaped(&text))
}

/// `text` as RFC 4514 §2.4 writes a value: `"+,;<>\` escaped, a leading `#` or space and a
/// trailing space escaped, NUL and other control characters as `\XX`.
fn escaped(text: &str) -> String {
    let last = text.chars().count().saturating_sub(1);
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            c if c.is_control() => {
                let mut buffer = [0; 4];
                for byte in c.encode_utf8(&mut buffer).bytes() {
                    out.push_str(&format!("\\{byte:02X}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER element.
    fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match contents.len() {
            n @ 0..=0x7f => out.push(n as u8),
            n @ 0x80..=0xff => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend(contents);
        out
    }

    /// A certificate whose to-be-signed part holds `subject` (a Name's contents): the fields
    /// before it as placeholders of the right types, the signature after it left out.
    fn certificate(subject: &[u8]) -> Vec<u8> {
        let tbs = [
            tlv(VERSION, &tlv(INTEGER, &[2])),
            tlv(INTEGER, &[1]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, subject),
            tlv(SEQUENCE, &[]),
        ]
        .concat();
        tlv(SEQUENCE, &tlv(SEQUENCE, &tbs))
    }

    fn rdn(attributes: &[(&[u8], u8, &[u8])]) -> Vec<u8> {
        let inner: Vec<u8> = attributes
            .iter()
            .flat_map(|(oid, tag, value)| {
                tlv(SEQUENCE, &[tlv(OID, oid), tlv(*tag, value)].concat())
            })
            .collect();
        tlv(SET, &inner)
    }

    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0a];
    const OU: &[u8] = &[0x55, 0x04, 0x0b];

    #[test]
    fn a_subject_reads_last_rdn_first_with_short_names() {
        let subject = [rdn(&[(O, 0x13, b"Example")]), rdn(&[(CN, 0x0c, b"alice")])].concat();
        assert_eq!(
            subject_of(&certificate(&subject)).unwrap(),
            "CN=alice,O=Example"
        );
    }

    #[test]
    fn a_multi_valued_rdn_joins_with_plus_and_unknown_types_are_dotted() {
        let email = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]; // 1.2.840.113549.1.9.1
        let subject = rdn(&[(OU, 0x0c, b"ops"), (email, 0x16, b"a@example.com")]);
        assert_eq!(
            subject_of(&certificate(&subject)).unwrap(),
            "OU=ops+1.2.840.113549.1.9.1=a@example.com"
        );
    }

    #[test]
    fn special_characters_are_escaped_so_no_subject_reads_as_another() {
        let subject = rdn(&[(CN, 0x0c, b"#a,O=Evil+b\\ ")]);
        assert_eq!(
            subject_of(&certificate(&subject)).unwrap(),
            "CN=\\#a\\,O=Evil\\+b\\\\\\ "
        );
        let control = rdn(&[(CN, 0x0c, b"a\nb\0")]);
        assert_eq!(subject_of(&certificate(&control)).unwrap(), "CN=a\\0Ab\\00");
    }

    #[test]
    fn other_string_types_are_decoded_and_non_strings_written_as_hex() {
        let bmp = rdn(&[(CN, 0x1e, &[0x00, 0x61, 0x00, 0xe9])]);
        assert_eq!(subject_of(&certificate(&bmp)).unwrap(), "CN=aé");
        let octets = rdn(&[(CN, 0x04, &[0xde, 0xad])]);
        assert_eq!(subject_of(&certificate(&octets)).unwrap(), "CN=#0402dead");
    }

    #[test]
    fn an_empty_subject_and_broken_der_are_refused() {
        assert_eq!(subject_of(&certificate(&[])), Err(SubjectError::Empty));
        let good = certificate(&rdn(&[(CN, 0x0c, b"alice")]));
        for cut in 0..good.len() {
            assert_eq!(
                subject_of(&good[..cut]),
                Err(SubjectError::Malformed),
                "{cut}"
            );
        }
        assert_eq!(
            subject_of(&[good.clone(), vec![0]].concat()),
            Err(SubjectError::Malformed)
        );
        let bad_utf8 = certificate(&rdn(&[(CN, 0x0c, &[0xff])]));
        assert_eq!(subject_of(&bad_utf8), Err(SubjectError::Malformed));
        let empty_set = certificate(&tlv(SET, &[]));
        assert_eq!(subject_of(&empty_set), Err(SubjectError::Malformed));
    }
}
