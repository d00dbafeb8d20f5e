use tokio::io::AsyncWriteExt;

use super::*;

/// A masked client frame, as a browser or phone sends it.
pub(crate) fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![if fin { 0x80 } else { 0 } | opcode];
    match payload.len() {
        len if len < 126 => out.push(0x80 | len as u8),
        len if len <= 0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

async fn read_all(input: &[u8], max: usize) -> Vec<Result<Message, String>> {
    let mut reader = FrameReader::new(max, &[]);
    let mut io = input;
    let mut out = Vec::new();
    loop {
        match reader.read_message(&mut io, &Unmetered).await {
            Ok(Some(message)) => out.push(Ok(message)),
            Ok(None) => return out,
            Err(err) => {
                out.push(Err(err.to_string()));
                return out;
            }
        }
    }
}

#[tokio::test]
async fn reads_text_binary_and_control_frames_of_every_length_encoding() {
    let big = vec![7u8; 70_000];
    let mid = vec![9u8; 300];
    let mut input = client_frame(true, OP_TEXT, "héllo".as_bytes());
    input.extend(client_frame(true, OP_BINARY, &mid));
    input.extend(client_frame(true, OP_PING, b"p"));
    input.extend(client_frame(true, OP_BINARY, &big));
    input.extend(client_frame(true, OP_PONG, b""));
    input.extend(client_frame(true, OP_CLOSE, &super::super::codec::close_payload(1000, "bye")));
    let got = read_all(&input, 1 << 20).await;
    assert_eq!(
        got,
        vec![
            Ok(Message::Text("héllo".into())),
            Ok(Message::Binary(mid)),
            Ok(Message::Ping(b"p".to_vec())),
            Ok(Message::Binary(big)),
            Ok(Message::Pong),
            Ok(Message::Close(Some(1000))),
        ]
    );
}

#[tokio::test]
async fn reassembles_fragments_with_interleaved_control_frames() {
    let mut input = client_frame(false, OP_TEXT, b"ab");
    input.extend(client_frame(true, OP_PING, b""));
    input.extend(client_frame(false, OP_CONTINUATION, b"cd"));
    input.extend(client_frame(true, OP_CONTINUATION, b"ef"));
    let got = read_all(&input, 1 << 20).await;
    assert_eq!(got, vec![Ok(Message::Ping(vec![])), Ok(Message::Text("abcdef".into()))]);
}

#[tokio::test]
async fn survives_cancellation_at_every_byte() {
    use futures_util::FutureExt;
    // Feed frames one byte at a time and drop the read whenever it would wait.
    let small = b"tiny".to_vec();
    let large = vec![5u8; READ_BUFFER_LEN + 904];
    let input = [client_frame(true, OP_TEXT, &small), client_frame(true, OP_BINARY, &large)].concat();
    let (mut client, mut server) = tokio::io::duplex(64);
    let mut reader = FrameReader::new(1 << 20, &[]);
    let mut got = Vec::new();
    for byte in &input {
        client.write_all(&[*byte]).await.unwrap();
        if let Some(result) = reader.read_message(&mut server, &Unmetered).now_or_never() {
            got.push(result.unwrap().unwrap());
        }
    }
    assert_eq!(got, vec![Message::Text("tiny".into()), Message::Binary(large)]);
}

#[tokio::test]
async fn refuses_oversized_frames_before_allocating() {
    // A header announcing 2^62 bytes must fail at once, not try to allocate.
    let mut input = vec![0x82, 0x80 | 127];
    input.extend_from_slice(&(1u64 << 62).to_be_bytes());
    input.extend_from_slice(&[1, 2, 3, 4]);
    assert_eq!(read_all(&input, 1 << 20).await, vec![Err("message too big".into())]);

    let at_limit = client_frame(true, OP_BINARY, &[1u8; 100]);
    assert!(matches!(read_all(&at_limit, 100).await[..], [Ok(Message::Binary(_))]));
    assert_eq!(read_all(&at_limit, 99).await, vec![Err("message too big".into())]);

    let mut fragmented = client_frame(false, OP_BINARY, &[1u8; 60]);
    fragmented.extend(client_frame(true, OP_CONTINUATION, &[1u8; 60]));
    assert_eq!(read_all(&fragmented, 100).await, vec![Err("message too big".into())]);
}

#[tokio::test]
async fn refuses_protocol_violations() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            {
                let mut f = client_frame(true, OP_TEXT, b"x");
                f[1] &= 0x7F;
                f
            },
            "unmasked",
        ),
        (
            {
                let mut f = client_frame(true, OP_TEXT, b"x");
                f[0] |= 0x40;
                f
            },
            "reserved",
        ),
        (client_frame(true, 0x3, b"x"), "unknown opcode"),
        (client_frame(false, OP_PING, b"x"), "fragmented control"),
        (client_frame(true, OP_PING, &[0u8; 126]), "control frame too long"),
        (client_frame(true, OP_CONTINUATION, b"x"), "continuation without"),
        ([client_frame(false, OP_TEXT, b"x"), client_frame(true, OP_TEXT, b"y")].concat(), "inside a fragmented"),
        (client_frame(true, OP_CLOSE, &[3]), "one-byte"),
        (client_frame(true, OP_CLOSE, &1005u16.to_be_bytes()), "invalid close code"),
        (client_frame(true, OP_TEXT, &[0xff, 0xfe]), "not UTF-8"),
    ];
    for (input, expected) in cases {
        let got = read_all(&input, 1 << 20).await;
        match got.last() {
            Some(Err(err)) => assert!(err.contains(expected), "{err} does not mention {expected}"),
            other => panic!("expected an error mentioning {expected}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn end_of_stream_mid_frame_is_an_error_and_between_frames_is_not() {
    let frame = client_frame(true, OP_TEXT, b"hello");
    assert_eq!(read_all(&frame, 100).await, vec![Ok(Message::Text("hello".into()))]);
    let cut = &frame[..frame.len() - 1];
    assert!(matches!(&read_all(cut, 100).await[..], [Err(err)] if err.contains("read failed")));
}

/// A meter that remembers the most it was ever charged.
#[derive(Default)]
struct Peak {
    held: std::cell::Cell<usize>,
    peak: std::cell::Cell<usize>,
}

impl Meter for Peak {
    fn grow(&self, bytes: usize) -> bool {
        self.held.set(self.held.get() + bytes);
        self.peak.set(self.peak.get().max(self.held.get()));
        true
    }

    fn shrink(&self, bytes: usize) {
        self.held.set(self.held.get() - bytes);
    }
}

#[tokio::test]
async fn a_large_message_comes_out_in_bounded_parts_as_it_arrives() {
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut input = client_frame(false, OP_BINARY, &big[..100_000]);
    input.extend(client_frame(true, OP_PING, b"p"));
    input.extend(client_frame(true, OP_CONTINUATION, &big[100_000..]));
    let mut reader = FrameReader::new(1 << 20, &[]);
    let meter = Peak::default();
    let mut io = &input[..];
    let (mut got, mut parts, mut pings) = (Vec::new(), Vec::new(), 0);
    while let Some(event) = reader.read_event(&mut io, &meter).await.unwrap() {
        match event {
            Event::Data(part) => {
                assert!(part.bytes.len() <= PART_LEN && !part.text);
                parts.push((part.first, part.fin));
                got.extend_from_slice(&part.bytes);
            }
            Event::Ping(payload) => {
                assert_eq!(payload, b"p");
                pings += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, big);
    assert_eq!(pings, 1, "a ping inside the message comes out between its parts");
    assert!(parts.len() >= big.len() / PART_LEN, "{} parts", parts.len());
    assert_eq!(parts.first(), Some(&(true, false)));
    assert_eq!(parts.last(), Some(&(false, true)));
    assert!(parts[1..parts.len() - 1].iter().all(|flags| *flags == (false, false)));
    assert!(meter.peak.get() <= PART_LEN + HEADER_ROOM, "held {} at most", meter.peak.get());
    assert_eq!(meter.held.get(), 0);
}

#[tokio::test]
async fn utf8_is_checked_across_parts_and_fragments_and_fails_before_the_message_ends() {
    // "é" and "€" cut between fragments, and a four-byte character cut by the part length.
    let mut text = "a".repeat(PART_LEN - 1).into_bytes();
    text.extend_from_slice("😀 ok é€".as_bytes());
    let mut input = client_frame(false, OP_TEXT, &text[..text.len() - 3]);
    input.extend(client_frame(false, OP_CONTINUATION, &text[text.len() - 3..text.len() - 1]));
    input.extend(client_frame(true, OP_CONTINUATION, &text[text.len() - 1..]));
    let expected = String::from_utf8(text).unwrap();
    assert_eq!(read_all(&input, 1 << 20).await, vec![Ok(Message::Text(expected))]);

    // An invalid byte in the first fragment fails at once, though the message never ends.
    let mut reader = FrameReader::new(1 << 20, &[]);
    let input = client_frame(false, OP_TEXT, &[b'o', b'k', 0xff]);
    let mut io = &input[..];
    assert!(matches!(reader.read_event(&mut io, &Unmetered).await, Err(ReadError::InvalidUtf8)));
    // A character left unfinished at the end of the message.
    let truncated = client_frame(true, OP_TEXT, &"é".as_bytes()[..1]);
    assert!(matches!(&read_all(&truncated, 100).await[..], [Err(err)] if err.contains("UTF-8")));
}

/// The `frame_reader` fuzz target's seeds, replayed: the relay's reader and tungstenite agree on
/// each, whole and cut into reads of a few sizes, and the seeds reach every way a reader stops.
#[tokio::test]
async fn the_reader_agrees_with_tungstenite_on_the_fuzz_seeds() {
    use super::super::reader_check::{compare, Stop};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/frame_reader");
    let mut stops = std::collections::BTreeSet::new();
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let seed = std::fs::read(&path).unwrap();
        let (&split, data) = seed.split_first().unwrap();
        let whole = compare(data, data.len()).await.unwrap_or_else(|differ| panic!("{}: {differ}", path.display()));
        for size in [usize::from(split) + 1, 1, 3, 7] {
            let cut = compare(data, size).await.unwrap_or_else(|differ| panic!("{}: {differ}", path.display()));
            assert_eq!(cut, whole, "{}: the verdict depends on read sizes", path.display());
        }
        stops.insert(format!("{:?}", whole.stop));
        seeds += 1;
    }
    assert!(seeds >= 20, "{seeds} seeds in {}", dir.display());
    let all = [Stop::Ended, Stop::Closed, Stop::TooBig, Stop::Protocol, Stop::Utf8].map(|stop| format!("{stop:?}"));
    assert_eq!(stops, all.into_iter().collect(), "the seeds reach every way of stopping");
}
