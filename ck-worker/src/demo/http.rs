//! The little HTTP/1.x the demo worker speaks: parsing a request head (request line and
//! headers up to the blank line) and formatting a response. No I/O happens here.
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest request head accepted (request line + headers + blank line); longer gets 431.
pub const MAX_HEAD: usize = 16 * 1024;

/// What the server needs to know about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method, e.g. `GET`.
    pub method: String,
    /// The request target, e.g. `/healthz?verbose`.
    pub target: String,
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Whether the client wants the connection kept open after this request.
    pub keep_alive: bool,
    /// Length of the body that follows the head (`Content-Length`, else 0).
    pub content_length: u64,
    /// Whether the client waits for `100 Continue` before sending the body.
    pub expect_continue: bool,
}

impl Request {
    /// The target's path, without any query string (and without scheme and authority when
    /// the target is in absolute form, `http://host/path`).
    pub fn path(&self) -> &str {
        let path = match self.target.split_once("://") {
            Some((_, rest)) if !self.target.starts_with('/') => {
                rest.find('/').map_or("/", |i| &rest[i..])
            }
            _ => &self.target,
        };
        path.split(['?', '#']).next().unwrap_or("")
    }
}

/// A request that cannot be served; the connection is answered with the status and closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Malformed request line or header: 400.
    BadRequest(&'static str),
    /// The head exceeds [`MAX_HEAD`]: 431.
    HeadTooLarge,
    /// `Transfer-Encoding` (e.g. chunked request bodies) is not supported: 501.
    TransferEncoding,
    /// Not HTTP/1.0 or HTTP/1.1: 505.
    Version,
}

impl ParseError {
    /// The status line's code and reason for this error.
    pub fn status(self) -> (u16, &'static str) {
        match self {
            ParseError::BadRequest(_) => (400, "Bad Request"),
            ParseError::HeadTooLarge => (431, "Request Header Fields Too Large"),
            ParseError::TransferEncoding => (501, "Not Implemented"),
            ParseError::Version => (505, "HTTP Version Not Supported"),
        }
    }
}

/// Parses the request head at the start of `buf`.
///
/// Returns `Ok(None)` while the head is incomplete (no CRLFCRLF yet) and short enough to wait
/// for, or the request and the length of its head (the body, if any, starts there).
pub fn parse_head(buf: &[u8]) -> Result<Option<(Request, usize)>, ParseError> {
    let window = &buf[..buf.len().min(MAX_HEAD)];
    let Some(end) = window.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() >= MAX_HEAD {
            Err(ParseError::HeadTooLarge)
        } else {
            Ok(None)
        };
    };
    // Every line of the head, the last header's included, ends in CRLF.
    let mut lines = buf[..end + 2].split_inclusive(|&b| b == b'\n').map(|line| {
        line.strip_suffix(b"\r\n")
            .ok_or(ParseError::BadRequest("bare LF in head"))
    });
    // RFC 9112 2.2: a server SHOULD ignore empty lines before the request line.
    let mut request_line = lines.next().unwrap_or(Ok(b""))?;
    while request_line.is_empty() {
        request_line = lines
            .next()
            .ok_or(ParseError::BadRequest("no request line"))??;
    }
    let request_line =
        std::str::from_utf8(request_line).map_err(|_| ParseError::BadRequest("request line"))?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ParseError::BadRequest("request line"));
    };
    if !is_token(method.as_bytes()) || target.is_empty() || target.bytes().any(|b| b <= b' ') {
        return Err(ParseError::BadRequest("request line"));
    }
    let minor = match version {
        "HTTP/1.1" => 1,
        "HTTP/1.0" => 0,
        v if v.len() == 8 && v.starts_with("HTTP/") && v.as_bytes()[6] == b'.' => {
            return Err(ParseError::Version);
        }
        _ => return Err(ParseError::BadRequest("request line")),
    };
    let mut req = Request {
        method: method.to_string(),
        target: target.to_string(),
        minor,
        keep_alive: minor == 1,
        content_length: 0,
        expect_continue: false,
    };
    let (mut close, mut keep_alive, mut content_length, mut host) = (false, false, None, false);
    for line in lines {
        let line = line?;
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(ParseError::BadRequest("header without colon"))?;
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if !is_token(name) {
            // Also catches obsolete line folding and whitespace before the colon.
            return Err(ParseError::BadRequest("header name"));
        }
        if value.iter().any(|&b| b < b' ' && b != b'\t' || b == 0x7f) {
            return Err(ParseError::BadRequest("control character in header value"));
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            let digits = std::str::from_utf8(value).unwrap_or("");
            let all_digits = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            let n: u64 = match digits.parse() {
                Ok(n) if all_digits => n,
                _ => return Err(ParseError::BadRequest("Content-Length")),
            };
            if content_length.is_some_and(|old| old != n) {
                return Err(ParseError::BadRequest("conflicting Content-Length"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Err(ParseError::TransferEncoding);
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                close |= option.eq_ignore_ascii_case(b"close");
                keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"expect") {
            req.expect_continue = value.eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case(b"host") {
            host = true;
        }
    }
    if minor == 1 && !host {
        // RFC 9112 3.2: a server MUST answer 400 to an HTTP/1.1 request without Host.
        return Err(ParseError::BadRequest("missing Host header"));
    }
    req.keep_alive = !close && (minor == 1 || keep_alive);
    req.content_length = content_length.unwrap_or(0);
    req.expect_continue &= minor == 1;
    Ok(Some((req, end + 4)))
}

/// Whether `s` is a non-empty RFC 9110 token (method or header name).
fn is_token(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// How the response tells the client what happens to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Kept open; HTTP/1.1's default, so no header is needed.
    KeepAliveDefault,
    /// Kept open for an HTTP/1.0 client that asked: `Connection: keep-alive`.
    KeepAliveExplicit,
    /// Closed after this response: `Connection: close`.
    Close,
}

/// Appends a complete response to `out`; the body is omitted (but its length still sent) when
/// `head_only` is set, as for `HEAD`. `extra` holds additional header lines, each ending CRLF.
pub fn write_response(
    out: &mut Vec<u8>,
    (code, reason): (u16, &str),
    body: &[u8],
    head_only: bool,
    persistence: Persistence,
    extra: &str,
) {
    let connection = match persistence {
        Persistence::KeepAliveDefault => "",
        Persistence::KeepAliveExplicit => "Connection: keep-alive\r\n",
        Persistence::Close => "Connection: close\r\n",
    };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nDate: {}\r\nContent-Type: text/plain\r\n\
         Content-Length: {}\r\n{connection}{extra}\r\n",
        http_date(SystemTime::now()),
        body.len(),
    );
    out.extend_from_slice(head.as_bytes());
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// Formats `time` as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) for the `Date` header.
pub fn http_date(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // 1970-01-01 was a Thursday.
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    // Howard Hinnant's days-to-civil algorithm, for dates after 1970.
    let z = days + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let month_name = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(month - 1) as usize];
    format!(
        "{weekday}, {day:02} {month_name} {year} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn parse(text: &str) -> Result<Option<(Request, usize)>, ParseError> {
        parse_head(text.as_bytes())
    }

    #[test]
    fn parses_a_simple_get() {
        let text = "GET /healthz?x=1 HTTP/1.1\r\nHost: a\r\nUser-Agent: t\r\n\r\nNEXT";
        let (req, len) = parse(text).unwrap().unwrap();
        assert_eq!(len, text.len() - 4);
        assert_eq!(
            (req.method.as_str(), req.path(), req.minor),
            ("GET", "/healthz", 1)
        );
        assert!(req.keep_alive && req.content_length == 0 && !req.expect_continue);
        let path = |target: &str| {
            let text = format!("GET {target} HTTP/1.0\r\n\r\n");
            parse(&text).unwrap().unwrap().0.path().to_string()
        };
        assert_eq!(path("http://h:1/healthz?x"), "/healthz");
        assert_eq!(
            (path("http://h"), path("/a://b")),
            ("/".into(), "/a://b".into())
        );
    }

    #[test]
    fn waits_for_the_blank_line() {
        assert_eq!(parse(""), Ok(None));
        assert_eq!(parse("GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
        assert_eq!(parse("GET / HTTP/1.1\r\nHost: a\r\n\r"), Ok(None));
    }

    #[test]
    fn connection_persistence() {
        let keep = |text: &str| parse(text).unwrap().unwrap().0.keep_alive;
        assert!(keep("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!keep(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n"
        ));
        assert!(!keep(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade, close\r\n\r\n"
        ));
        assert!(!keep("GET / HTTP/1.0\r\n\r\n"));
        assert!(keep("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    }

    #[test]
    fn body_length_and_expect() {
        let (req, _) = parse(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\nContent-Length: 12\r\n\
             Expect: 100-continue\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(req.content_length, 12);
        assert!(req.expect_continue);
        for bad in ["-1", "1x", "", "+5", "1, 2"] {
            let text = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {bad}\r\n\r\n");
            assert!(
                matches!(parse(&text), Err(ParseError::BadRequest(_))),
                "{bad}"
            );
        }
        let text = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert!(matches!(parse(text), Err(ParseError::BadRequest(_))));
        let text = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse(text), Err(ParseError::TransferEncoding));
    }

    #[test]
    fn rejects_malformed_heads() {
        for text in [
            "GET /\r\n\r\n",
            "GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.1 x\r\nHost: a\r\n\r\n",
            "G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET / FTP/1.1\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
            "GET / HTTP/1.1\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\x01b\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
        ] {
            assert!(
                matches!(parse(text), Err(ParseError::BadRequest(_))),
                "{text:?}"
            );
        }
        assert_eq!(parse("GET / HTTP/2.0\r\n\r\n"), Err(ParseError::Version));
        // Leading empty lines are skipped.
        assert!(parse("\r\nGET / HTTP/1.0\r\n\r\n").unwrap().is_some());
    }

    #[test]
    fn head_size_limit() {
        let big = format!(
            "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n",
            "a".repeat(MAX_HEAD)
        );
        assert_eq!(parse(&big), Err(ParseError::HeadTooLarge));
        let just_fits = "GET / HTTP/1.1\r\nHost: a\r\nX: ";
        let pad = MAX_HEAD - just_fits.len() - 4;
        let text = format!("{just_fits}{}\r\n\r\n", "a".repeat(pad));
        assert_eq!(text.len(), MAX_HEAD);
        assert_eq!(parse(&text).unwrap().unwrap().1, MAX_HEAD);
        let text = format!("{just_fits}{}\r\n\r\n", "a".repeat(pad + 1));
        assert_eq!(parse(&text), Err(ParseError::HeadTooLarge));
    }

    #[test]
    fn formats_responses_and_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        let t = UNIX_EPOCH + Duration::from_secs(951_825_600);
        assert_eq!(http_date(t), "Tue, 29 Feb 2000 12:00:00 GMT");
        let mut out = Vec::new();
        write_response(
            &mut out,
            (200, "OK"),
            b"ok\n",
            false,
            Persistence::Close,
            "",
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\nDate: "), "{text}");
        assert!(text.ends_with(
            "GMT\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"
        ));
        let mut out = Vec::new();
        write_response(
            &mut out,
            (200, "OK"),
            b"ok\n",
            true,
            Persistence::KeepAliveDefault,
            "",
        );
        assert!(out.ends_with(b"Content-Length: 3\r\n\r\n"));
    }
}
