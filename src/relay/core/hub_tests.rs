use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::sync::Notify;

use super::super::queue::{Action, Cork, QueueLimits, MAX_PONGS, TOO_SLOW};
use super::*;

const LIMITS: QueueLimits = QueueLimits { frames: 4, bytes: 100 };

fn ledger() -> Arc<Ledger> {
    Arc::new(Ledger { budget: usize::MAX, metrics: Arc::default() })
}

/// A place in code `code`; an agent speaks relay framing 3.
fn claim(code: u128, role: PeerRole, conn: u64, notices: bool) -> Claim {
    Claim { code, role, conn, notices, framing: Framing::V3 }
}

fn queue() -> Arc<SendQueue> {
    Arc::new(SendQueue::new(LIMITS, ledger()))
}

/// What the writer would send, as text: a phone's frames as they are, an agent's as
/// `KIND peer payload`.
fn drain(queue: &SendQueue) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(action) = queue.try_next() {
        match action {
            Action::Frame(frame) => out.push(match frame.tag {
                Some(tag) => {
                    let (kind, peer, _) = relay::split(&tag).unwrap();
                    format!("{kind:?} {peer} {}", String::from_utf8(frame.payload).unwrap())
                }
                None => String::from_utf8(frame.payload).unwrap(),
            }),
            Action::Close(end) => {
                out.push(format!("close {end:?}"));
                break;
            }
            Action::Ping => out.push("ping".into()),
            Action::Pong(payload) => out.push(format!("pong {}", String::from_utf8(payload).unwrap())),
        }
    }
    out
}

fn joined() -> String {
    presence(PeerRole::Agent, PeerState::Joined).payload.into_iter().map(char::from).collect()
}

fn left() -> String {
    presence(PeerRole::Agent, PeerState::Left).payload.into_iter().map(char::from).collect()
}

fn queued(queue: &SendQueue, frame: OutFrame) -> bool {
    matches!(queue.push(frame), Push::Queued)
}

fn text(text: &str) -> OutFrame {
    OutFrame::text(text.into())
}

#[test]
fn queue_is_bounded_by_frames_and_bytes_and_ending_frees_it() {
    let queue = queue();
    for _ in 0..4 {
        assert!(queued(&queue, OutFrame::binary(vec![0; 10])));
    }
    assert_eq!(queue.queued(), (4, 40));
    assert!(matches!(queue.push(OutFrame::binary(vec![0; 10])), Push::Full(frame) if frame.payload.len() == 10));
    assert_eq!(queue.queued(), (4, 40), "a full queue takes no more data");
    for _ in 0..2 * MAX_PHONES_PER_CODE + 2 {
        queue.push_notice(text("n"));
    }
    assert!(queue.ended().is_none(), "a few notices still fit");
    queue.push_notice(text("n"));
    assert_eq!(queue.ended(), Some(TOO_SLOW));
    assert_eq!(queue.queued(), (0, 0), "ending frees the queue");
    assert!(matches!(queue.push(OutFrame::binary(vec![0; 10])), Push::Dropped));

    let queue = self::queue();
    assert!(queued(&queue, OutFrame::binary(vec![0; 500])), "one large frame fits an empty queue");
    assert!(matches!(queue.push(OutFrame::binary(vec![0; 1])), Push::Full(_)), "nothing queues behind it");
    assert!(matches!(queue.try_next(), Some(Action::Frame(_))));
    assert!(queued(&queue, OutFrame::binary(vec![0; 100])));
}

#[tokio::test]
async fn a_full_queue_wakes_its_sender_when_a_frame_leaves_or_it_ends() {
    let queue = queue();
    for _ in 0..4 {
        assert!(queued(&queue, OutFrame::binary(vec![0; 1])));
    }
    let mut waiting = Box::pin(queue.room_for(1));
    assert!((&mut waiting).now_or_never().is_none(), "no room yet");
    assert!(matches!(queue.try_next(), Some(Action::Frame(_))));
    assert!(waiting.now_or_never().is_some(), "room after one frame left");

    assert!(queued(&queue, OutFrame::binary(vec![0; 1])));
    let mut waiting = Box::pin(queue.room_for(1));
    assert!((&mut waiting).now_or_never().is_none());
    queue.end(End::Abort);
    assert!(waiting.now_or_never().is_some(), "an ending socket releases its senders");
}

#[tokio::test]
async fn ending_wakes_a_task_that_polled_it_before_the_end() {
    let queue = queue();
    let poke = Arc::new(Notify::new());
    let waiter = tokio::spawn({
        let (queue, poke) = (Arc::clone(&queue), Arc::clone(&poke));
        async move {
            let ending = queue.ending();
            tokio::pin!(ending);
            loop {
                tokio::select! {
                    () = &mut ending => return,
                    // Woken for something else: `ending` is polled again with the same waker.
                    () = poke.notified() => {}
                }
            }
        }
    });
    for _ in 0..3 {
        poke.notify_one();
        tokio::task::yield_now().await;
    }
    assert!(!waiter.is_finished(), "not ended yet");
    queue.end(End::Abort);
    tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("the end woke the waiter").unwrap();
    assert!(queue.ending().now_or_never().is_some(), "an ended queue resolves at once");
}

#[tokio::test]
async fn a_writer_woken_for_other_reasons_still_hears_of_its_next_frame() {
    let queue = queue();
    let poke = Arc::new(Notify::new());
    let writer = tokio::spawn({
        let (queue, poke) = (Arc::clone(&queue), Arc::clone(&poke));
        async move {
            let next = queue.next();
            tokio::pin!(next);
            loop {
                tokio::select! {
                    action = &mut next => return action,
                    // Woken for its socket's reads: the wait is polled again with the same waker.
                    () = poke.notified() => {}
                }
            }
        }
    });
    for _ in 0..3 {
        poke.notify_one();
        tokio::task::yield_now().await;
    }
    assert!(!writer.is_finished(), "nothing to write yet");
    assert!(queued(&queue, text("late")));
    let action = tokio::time::timeout(Duration::from_secs(10), writer).await.expect("the frame woke the writer");
    assert!(matches!(action.unwrap(), Action::Frame(frame) if frame.payload == b"late"));
}

/// The server frames in `bytes`: (opcode and fin byte, payload).
fn server_frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while let [b0, b1, rest @ ..] = bytes {
        let (len, rest) = match b1 {
            126 => (usize::from(u16::from_be_bytes([rest[0], rest[1]])), &rest[2..]),
            127 => (u64::from_be_bytes(rest[..8].try_into().unwrap()) as usize, &rest[8..]),
            short => (usize::from(*short), rest),
        };
        frames.push((*b0, rest[..len].to_vec()));
        bytes = &rest[len..];
    }
    frames
}

#[tokio::test]
async fn a_frame_goes_straight_into_an_idle_socket_and_behind_whatever_waits_in_order() {
    use tokio::io::AsyncReadExt;

    use super::super::socket::write_side;
    use super::super::stream::RelayStream;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let (_read, mut write, sink) = server.into_halves();
    let limits = QueueLimits { frames: 4096, bytes: 1 << 30 };
    let queue = Arc::new(SendQueue::with_sink(limits, ledger(), sink));
    // A frame of a small payload with room for its header (as the reader leaves it), then a large one.
    let numbered = |n: u32| {
        let len = if n % 2 == 0 { 100 } else { 4000 };
        let mut payload = Vec::with_capacity(len + super::super::codec::HEADER_ROOM);
        payload.extend_from_slice(&n.to_be_bytes());
        payload.resize(len, n as u8);
        OutFrame::binary(payload)
    };

    assert!(queued(&queue, numbered(0)));
    assert!(queue.try_next().is_none(), "written at once: nothing waits for the writer");
    let mut first = vec![0u8; 102];
    client.read_exact(&mut first).await.unwrap();
    assert_eq!(server_frames(&first), [(0x82, numbered(0).payload)]);

    // A pong waiting for the writer: the next frame waits behind it.
    queue.pong(b"p".to_vec());
    assert!(queued(&queue, numbered(1)));
    assert!(matches!(queue.try_next(), Some(Action::Pong(_))));
    assert!(matches!(queue.try_next(), Some(Action::Frame(frame)) if frame.payload == numbered(1).payload));

    // Nobody reads the client for a while: the socket's buffers fill, the rest queues, and the
    // writer sends it once the client reads, every frame whole and in order.
    const FRAMES: u32 = 4000;
    for n in 2..FRAMES {
        assert!(queued(&queue, numbered(n)));
    }
    assert!(queue.queued().0 > 0, "a full socket leaves frames for the writer");
    let writer = tokio::spawn({
        let queue = Arc::clone(&queue);
        async move { write_side(&mut write, &queue).await }
    });
    let mut received = Vec::new();
    let mut frames = Vec::new();
    while frames.len() < (FRAMES - 2) as usize {
        let mut chunk = vec![0u8; 64 << 10];
        let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut chunk)).await.unwrap().unwrap();
        assert!(n > 0, "the stream ended after {} whole frames", frames.len());
        received.extend_from_slice(&chunk[..n]);
        frames = server_frames_complete(&received);
    }
    for (n, (head, payload)) in (2..FRAMES).zip(frames) {
        assert_eq!((head, payload), (0x82, numbered(n).payload), "frame {n}");
    }
    queue.end(End::close(1000, "done"));
    writer.await.unwrap().unwrap();
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert_eq!(server_frames(&rest), [(0x88, vec![0x03, 0xe8, b'd', b'o', b'n', b'e'])], "the close, then FIN");
}

/// A queue on a plain TCP socket, which a sender may write to at once: the client's end, the
/// queue, and its writer's half.
async fn socket_queue(
    limits: QueueLimits,
) -> (tokio::net::TcpStream, Arc<SendQueue>, super::super::stream::SharedWrite) {
    use super::super::stream::RelayStream;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let (_read, write, sink) = server.into_halves();
    (client, Arc::new(SendQueue::with_sink(limits, ledger(), sink)), write)
}

/// A payload larger than a loopback socket's buffers.
fn huge_payload() -> Vec<u8> {
    (0..16u32 << 20).map(|n| (n % 251) as u8).collect()
}

/// A queue on a plain TCP socket holding the rest of a frame larger than the socket's buffers,
/// which it took in part; the client's end, and the queue's writer half.
async fn half_written() -> (tokio::net::TcpStream, Arc<SendQueue>, super::super::stream::SharedWrite, Vec<u8>) {
    let (client, queue, write) = socket_queue(QueueLimits { frames: 16, bytes: 1 << 30 }).await;
    let payload = huge_payload();
    assert!(queued(&queue, OutFrame::binary(payload.clone())));
    let (frames, bytes) = queue.queued();
    assert!(frames == 1 && bytes < payload.len(), "the socket took part of the frame ({bytes} bytes left)");
    let mut expected = vec![0x82, 127];
    expected.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    expected.extend_from_slice(&payload);
    (client, queue, write, expected)
}

#[tokio::test]
async fn a_frame_the_socket_took_in_part_is_finished_before_a_pong() {
    use tokio::io::AsyncReadExt;

    use super::super::socket::write_side;

    let (mut client, queue, mut write, frame) = half_written().await;
    queue.pong(b"q".to_vec());
    let writer = tokio::spawn(async move { write_side(&mut write, &queue).await });
    let mut received = vec![0u8; frame.len() + 3];
    tokio::time::timeout(Duration::from_secs(30), client.read_exact(&mut received)).await.unwrap().unwrap();
    assert!(received[..frame.len()] == frame[..], "the frame whole, nothing inside it");
    assert_eq!(received[frame.len()..], [0x8A, 1, b'q'], "then the pong");
    writer.abort();
}

#[tokio::test]
async fn a_socket_ended_with_a_frame_half_written_gets_no_close_frame_inside_it() {
    use tokio::io::AsyncReadExt;

    use super::super::socket::write_side;

    let (mut client, queue, mut write, frame) = half_written().await;
    queue.end(TOO_SLOW);
    let writer = tokio::spawn(async move { write_side(&mut write, &queue).await });
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), client.read_to_end(&mut received)).await.unwrap().unwrap();
    writer.await.unwrap().unwrap();
    assert!(!received.is_empty() && received.len() < frame.len(), "the frame cut short: {} bytes", received.len());
    assert!(received[..] == frame[..received.len()], "then FIN: no close frame's bytes read as the frame's rest");
}

/// Reads from `client` until it has `count` whole server frames (and no more bytes).
async fn read_frames(client: &mut tokio::net::TcpStream, count: usize) -> Vec<(u8, Vec<u8>)> {
    use tokio::io::AsyncReadExt;

    let mut received = Vec::new();
    loop {
        let frames = server_frames_complete(&received);
        if frames.len() >= count {
            assert_eq!(frames.len(), count, "only the frames expected");
            return frames;
        }
        let mut chunk = vec![0u8; 256 << 10];
        let n = tokio::time::timeout(Duration::from_secs(30), client.read(&mut chunk)).await.unwrap().unwrap();
        assert!(n > 0, "the stream ended after {} whole frames", frames.len());
        received.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn frames_a_reader_corks_wait_for_its_release_then_go_in_one_write_before_what_others_queued() {
    let (mut client, queue, _write) = socket_queue(QueueLimits { frames: 16, bytes: 1 << 20 }).await;
    let cork = Cork::default();
    for n in 0..3 {
        assert!(matches!(queue.push_corked(text(&format!("corked {n}"))), Push::Corked));
        cork.hold(&queue);
    }
    assert_eq!((queue.written(), queue.queued().0), (0, 3), "nothing written while corked");
    assert!(queued(&queue, text("another sender's")), "queued behind the corked frames");
    assert!(matches!(queue.push_corked(text("corked 3")), Push::Corked), "a reader adds to what it corked");
    assert_eq!(queue.queued().0, 5);

    cork.release();
    assert_eq!(queue.queued(), (0, 0), "the socket took all five at once");
    let expected = ["corked 0", "corked 1", "corked 2", "another sender's", "corked 3"];
    assert_eq!(queue.written(), expected.iter().map(|text| 2 + text.len() as u64).sum::<u64>());
    let got = read_frames(&mut client, expected.len()).await;
    assert_eq!(got, expected.map(|text| (0x81, text.as_bytes().to_vec())));
    assert!(queue.try_next().is_none(), "nothing was left for the writer");
    cork.release();
    assert!(queue.try_next().is_none(), "a second release finds nothing");

    // A pong waiting for the writer: nothing is corked until the writer has sent it.
    queue.pong(b"p".to_vec());
    assert!(queued(&queue, text("behind the pong")), "not corked: the writer has work");
    assert!(matches!(queue.try_next(), Some(Action::Pong(_))));
}

#[tokio::test]
async fn a_corked_frame_the_socket_takes_in_part_is_finished_by_the_writer_before_a_pong() {
    use super::super::socket::write_side;

    let (mut client, queue, mut write) = socket_queue(QueueLimits { frames: 16, bytes: 1 << 30 }).await;
    let cork = Cork::default();
    let huge = huge_payload();
    for frame in [OutFrame::binary(huge.clone()), text("after")] {
        assert!(matches!(queue.push_corked(frame), Push::Corked));
        cork.hold(&queue);
    }
    cork.release();
    let (left, _) = queue.queued();
    assert!(left >= 1 && queue.written() > 0, "the socket took part: {left} frames left");
    queue.pong(b"q".to_vec());
    let writer = tokio::spawn({
        let queue = Arc::clone(&queue);
        async move { write_side(&mut write, &queue).await }
    });
    let got = read_frames(&mut client, 3).await;
    assert!(got[0].0 == 0x82 && got[0].1 == huge, "the large frame whole, nothing inside it");
    // The next frame was not begun: the pong may go before it, between two messages.
    assert_eq!(got[1..], [(0x8A, b"q".to_vec()), (0x81, b"after".to_vec())]);
    writer.abort();
}

/// Takes the writer's next action, as if it were written: false once there is none.
fn queue_is_busy(queue: &SendQueue) -> bool {
    queue.try_next().is_some()
}

#[tokio::test]
async fn a_reader_that_corked_a_queue_full_releases_it_before_waiting_for_room() {
    use super::super::socket::Forwarder;

    // The agent's queue takes four frames; its socket's writer is never run, so only the
    // reader's release can make room.
    let (mut client, agent, _write) = socket_queue(LIMITS).await;
    let hub = Hub::new(ledger());
    let (slot, _) = hub.join(&claim(9, PeerRole::Agent, 1, false), &agent).unwrap();
    let phone = queue();
    let (_, Seat::Phone { peer }) = hub.join(&claim(9, PeerRole::Phone, 2, false), &phone).unwrap() else { panic!() };
    // The agent's writer would have sent the notice of the phone's joining.
    while queue_is_busy(&agent) {}
    let cork = Cork::default();
    let to = Forwarder { hub: &hub, slot: &slot, own: &phone, cork: &cork, stall_timeout: Duration::from_secs(30) };
    let sent: Vec<String> = (0..10).map(|n| format!("m{n}")).collect();
    let forward = |body: &String| {
        let frame = OutFrame::tagged(header(Kind::Text, peer), body.as_bytes().to_vec());
        to.forward(frame, move |hub, slot, frame, cork| hub.to_agent(slot, peer, Some(1), frame, cork))
    };
    // The only frame of its read: written at once, nothing corked.
    forward(&sent[0]).await;
    assert_eq!((agent.queued().0, agent.written()), (0, 2 + 5 + 2));
    // The rest come from one read: corked, until the queue is full.
    cork.read_ahead(true);
    let forwarding = async {
        for body in &sent[1..] {
            forward(body).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), forwarding).await.expect("no wait for the stall timeout");
    assert!(agent.ended().is_none(), "the agent was not taken for a slow reader");
    // The last frames stay corked until the reader would next wait.
    cork.release();
    let got = read_frames(&mut client, sent.len()).await;
    let bodies: Vec<String> =
        got.iter().map(|(_, bytes)| String::from_utf8(bytes[relay::HEADER_LEN..].to_vec()).unwrap()).collect();
    assert_eq!(bodies, sent, "every message, in order");
}

/// The whole server frames at the start of `bytes`.
fn server_frames_complete(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut whole = 0;
    let mut at = bytes;
    while let [_, b1, rest @ ..] = at {
        let (len, header) = match b1 {
            126 if rest.len() >= 2 => (usize::from(u16::from_be_bytes([rest[0], rest[1]])), 4),
            127 if rest.len() >= 8 => (u64::from_be_bytes(rest[..8].try_into().unwrap()) as usize, 10),
            126 | 127 => break,
            short => (usize::from(*short), 2),
        };
        if at.len() < header + len {
            break;
        }
        whole += header + len;
        at = &at[header + len..];
    }
    server_frames(&bytes[..whole])
}

#[test]
fn batches_stop_at_their_limits_and_before_control_frames() {
    let queue = SendQueue::new(QueueLimits { frames: 10, bytes: 1000 }, ledger());
    for len in [10, 10, 10, 50, 10] {
        assert!(queued(&queue, OutFrame::binary(vec![0; len])));
    }
    let mut batch = Vec::new();
    queue.take_more(&mut batch, 2, 1000);
    assert_eq!(batch.len(), 2, "frame limit");
    batch.clear();
    queue.take_more(&mut batch, 10, 40);
    assert_eq!(batch.iter().map(|f| f.payload.len()).collect::<Vec<_>>(), [10], "byte limit");
    batch.clear();
    queue.ping();
    queue.take_more(&mut batch, 10, 1000);
    assert!(batch.is_empty(), "a waiting ping goes first");
    assert!(matches!(queue.try_next(), Some(Action::Ping)));
    queue.take_more(&mut batch, 10, 1000);
    assert_eq!(batch.len(), 2);
    assert_eq!(queue.queued(), (0, 0));
}

#[test]
fn every_ping_gets_its_pong_in_order_and_the_end_goes_before_everything() {
    let queue = queue();
    assert!(queued(&queue, text("a")));
    queue.ping();
    for n in 0..10 {
        queue.pong(n.to_string().into_bytes());
    }
    let expected: Vec<String> =
        (0..10).map(|n| format!("pong {n}")).chain(["ping".to_owned(), "a".to_owned()]).collect();
    assert_eq!(drain(&queue), expected, "ten pings, ten pongs");
    for n in 0..MAX_PONGS + 3 {
        queue.pong(n.to_string().into_bytes());
    }
    let pongs = drain(&queue);
    assert_eq!(pongs.len(), MAX_PONGS, "a bounded number wait");
    assert_eq!(pongs.last().map(String::as_str), Some(&*format!("pong {}", MAX_PONGS + 2)), "the latest kept");
    assert!(queued(&queue, text("b")));
    queue.end(End::Abort);
    queue.end(End::Echo(None));
    assert_eq!(drain(&queue), ["close Abort"]);
}

#[test]
fn a_phone_in_the_middle_of_a_message_is_closed_when_its_agent_goes() {
    let queue = queue();
    let part = |opcode, fin| OutFrame { opcode, fin, tag: None, payload: b"x".to_vec() };
    assert!(queued(&queue, part(super::super::codec::OP_TEXT, false)));
    assert!(queued(&queue, part(super::super::codec::OP_CONTINUATION, true)));
    queue.push_notice(presence(PeerRole::Agent, PeerState::Left));
    assert!(queue.ended().is_none(), "the message was whole");
    assert!(queued(&queue, part(super::super::codec::OP_BINARY, false)));
    queue.push_notice(presence(PeerRole::Agent, PeerState::Left));
    assert_eq!(
        queue.ended().and_then(|end| end.close_frame().map(|(code, _)| code)),
        Some(relay::close::PEER_GONE_MID_MESSAGE)
    );
}

#[test]
fn phones_get_their_own_peer_ids_and_the_agent_hears_each_join_and_leave() {
    let hub = Hub::new(ledger());
    let agent = queue();
    let (slot, seat) = hub.join(&claim(7, PeerRole::Agent, 1, true), &agent).unwrap();
    assert_eq!(seat, Seat::Agent { conn: 1 });
    assert!(drain(&agent).is_empty(), "alone: no notice");

    let (phone_a, phone_b) = (queue(), queue());
    let (_, Seat::Phone { peer: a }) = hub.join(&claim(7, PeerRole::Phone, 2, true), &phone_a).unwrap() else {
        panic!()
    };
    let (_, Seat::Phone { peer: b }) = hub.join(&claim(7, PeerRole::Phone, 3, true), &phone_b).unwrap() else {
        panic!()
    };
    assert_ne!(a, b);
    assert_eq!(drain(&agent), [format!("Joined {a} "), format!("Joined {b} ")]);
    assert_eq!(drain(&phone_a), [joined()]);
    assert_eq!(drain(&phone_b), [joined()]);

    let tagged = |kind, peer, body: &str| OutFrame::tagged(header(kind, peer), body.as_bytes().to_vec());
    assert!(matches!(hub.to_agent(&slot, a, Some(1), tagged(Kind::Text, a, "hi"), None), Forward::Done));
    assert_eq!(drain(&agent), [format!("Text {a} hi")]);
    assert!(matches!(hub.to_phone(&slot, 1, b, text("for b"), None), Forward::Done));
    assert_eq!((drain(&phone_a), drain(&phone_b)), (vec![], vec!["for b".to_owned()]), "only to that peer");
    assert!(matches!(hub.to_agent(&slot, a, Some(99), tagged(Kind::Text, a, "x"), None), Forward::Done));
    assert!(drain(&agent).is_empty(), "a message begun for another agent is dropped");

    for i in 0..LIMITS.frames {
        assert!(matches!(hub.to_phone(&slot, 1, a, text(&i.to_string()), None), Forward::Done));
    }
    match hub.to_phone(&slot, 1, a, text("one more"), None) {
        Forward::Full(frame, queue) => assert!(frame.payload == b"one more" && Arc::ptr_eq(&queue, &phone_a)),
        Forward::Done => panic!("a full queue must hand the frame back"),
    }
    hub.leave(7, &slot, Seat::Phone { peer: a });
    assert_eq!(drain(&agent), [format!("Left {a} ")]);
    assert!(
        matches!(hub.to_phone(&slot, 1, a, text("late"), None), Forward::Done),
        "a departed peer's frames are dropped"
    );
    let (_, Seat::Phone { peer: c }) = hub.join(&claim(7, PeerRole::Phone, 4, true), &queue()).unwrap() else {
        panic!()
    };
    assert!(c != a && c != b, "ids are never reused");
    assert!(matches!(hub.to_phone(&slot, 1, a, text("late"), None), Forward::Done));

    let agent2 = queue();
    hub.join(&claim(7, PeerRole::Agent, 5, true), &agent2).unwrap();
    assert_eq!(agent.ended(), Some(End::close(4001, "replaced")));
    assert_eq!(drain(&phone_b), [left(), joined()]);
    assert_eq!(drain(&agent2), [format!("Joined {b} "), format!("Joined {c} ")]);
    assert!(matches!(hub.to_phone(&slot, 1, b, text("stale"), None), Forward::Done));
    assert!(drain(&phone_b).is_empty(), "a replaced agent's frames are dropped");
    hub.leave(7, &slot, Seat::Agent { conn: 1 });
    assert!(drain(&phone_b).is_empty(), "a replaced agent leaving says nothing");

    assert!(matches!(hub.to_phone(&slot, 5, b, text("why"), None), Forward::Done));
    hub.close_phone(&slot, 5, b, 1008, "executor-unauthenticated");
    assert!(matches!(hub.to_phone(&slot, 5, b, text("after"), None), Forward::Done));
    let closed = End::Close { code: 1008, reason: "executor-unauthenticated".into() };
    assert_eq!(drain(&phone_b), ["why".to_owned(), format!("close {closed:?}")], "what came before, then the close");
    assert_eq!(phone_b.ended(), Some(closed));
    hub.leave(7, &slot, Seat::Phone { peer: b });
    hub.leave(7, &slot, Seat::Phone { peer: c });
    assert_eq!(drain(&agent2), [format!("Left {b} "), format!("Left {c} ")]);
    assert_eq!(hub.codes(), 1);
    hub.leave(7, &slot, Seat::Agent { conn: 5 });
    assert_eq!(hub.codes(), 0, "an empty slot is removed");
}

#[test]
fn a_full_code_makes_room_by_closing_its_oldest_phone_not_proven_and_never_a_proven_one() {
    let hub = Hub::new(ledger());
    let agent = queue();
    let (slot, _) = hub.join(&claim(9, PeerRole::Agent, 1, true), &agent).unwrap();
    let phones: Vec<_> = (0..MAX_PHONES_PER_CODE).map(|_| queue()).collect();
    let mut peers = Vec::new();
    for (n, phone) in phones.iter().enumerate() {
        let (_, Seat::Phone { peer }) = hub.join(&claim(9, PeerRole::Phone, 10 + n as u64, true), phone).unwrap()
        else {
            panic!()
        };
        peers.push(peer);
    }
    hub.prove(&slot, 1, peers[0]);
    hub.prove(&slot, 1, peers[2]);
    hub.prove(&slot, 99, peers[1]);
    drain(&agent);

    let made_room = End::close(4003, "made-room-for-a-new-phone");
    let newcomer = queue();
    let (_, Seat::Phone { peer: new }) = hub.join(&claim(9, PeerRole::Phone, 100, true), &newcomer).unwrap() else {
        panic!()
    };
    assert_eq!(
        phones[1].ended(),
        Some(made_room.clone()),
        "the oldest phone not proven (another agent's mark counts not)"
    );
    assert!(phones[0].ended().is_none() && phones[2].ended().is_none(), "proven phones stay");
    assert_eq!(drain(&agent), [format!("Left {} ", peers[1]), format!("Joined {new} ")]);
    hub.leave(9, &slot, Seat::Phone { peer: peers[1] });
    assert!(drain(&agent).is_empty(), "the phone that made room left already");
    assert!(matches!(hub.to_phone(&slot, 1, peers[1], text("late"), None), Forward::Done));
    assert_eq!(drain(&phones[1]), [format!("close {made_room:?}")], "nothing reaches it after its close");

    hub.join(&claim(9, PeerRole::Phone, 101, true), &queue()).unwrap();
    assert_eq!(phones[3].ended(), Some(made_room.clone()), "then the next oldest");
    for peer in &peers[4..] {
        hub.prove(&slot, 1, *peer);
    }
    hub.prove(&slot, 1, new);
    let (_, Seat::Phone { peer: last }) = hub.join(&claim(9, PeerRole::Phone, 102, true), &queue()).unwrap() else {
        panic!()
    };
    assert!(phones.iter().enumerate().all(|(n, phone)| (n == 1 || n == 3) == phone.ended().is_some()));
    hub.prove(&slot, 1, last);
    assert!(
        hub.join(&claim(9, PeerRole::Phone, 103, true), &queue()).is_err(),
        "every phone proven: the newcomer is refused"
    );
    assert!(hub.join(&claim(10, PeerRole::Phone, 104, true), &queue()).is_ok(), "another code is not full");
    hub.leave(9, &slot, Seat::Phone { peer: peers[7] });
    assert!(hub.join(&claim(9, PeerRole::Phone, 105, true), &queue()).is_ok(), "a freed place is taken again");

    hub.join(&claim(9, PeerRole::Agent, 2, true), &queue()).unwrap();
    hub.join(&claim(9, PeerRole::Phone, 106, true), &queue()).unwrap();
    assert_eq!(phones[0].ended(), Some(made_room), "a new agent's phones start unproven");
}

#[test]
fn without_an_agent_that_marks_proven_phones_a_full_code_refuses_the_newcomer() {
    let hub = Hub::new(ledger());
    let phones: Vec<_> = (0..MAX_PHONES_PER_CODE).map(|_| queue()).collect();
    for (n, phone) in phones.iter().enumerate() {
        hub.join(&claim(12, PeerRole::Phone, 10 + n as u64, true), phone).unwrap();
    }
    assert!(hub.join(&claim(12, PeerRole::Phone, 100, true), &queue()).is_err(), "no agent: nobody says who proved");
    let old_agent = Claim { framing: Framing::V2, ..claim(12, PeerRole::Agent, 1, true) };
    hub.join(&old_agent, &queue()).unwrap();
    assert!(hub.join(&claim(12, PeerRole::Phone, 101, true), &queue()).is_err(), "relay framing 2 marks nothing");
    assert!(phones.iter().all(|phone| phone.ended().is_none()), "nobody was closed to make room");
    hub.join(&claim(12, PeerRole::Agent, 2, true), &queue()).unwrap();
    assert!(hub.join(&claim(12, PeerRole::Phone, 102, true), &queue()).is_ok(), "an agent of relay framing 3 does");
    assert!(phones[0].ended().is_some());
}

#[test]
fn a_phone_that_asks_for_no_notices_hears_none() {
    let hub = Hub::new(ledger());
    let agent = queue();
    let (slot, _) = hub.join(&claim(11, PeerRole::Agent, 1, true), &agent).unwrap();
    let quiet = queue();
    let (_, Seat::Phone { peer }) = hub.join(&claim(11, PeerRole::Phone, 2, false), &quiet).unwrap() else { panic!() };
    assert_eq!(drain(&agent), [format!("Joined {peer} ")], "the agent still hears of it");
    hub.join(&claim(11, PeerRole::Agent, 3, true), &queue()).unwrap();
    hub.leave(11, &slot, Seat::Agent { conn: 3 });
    assert!(matches!(hub.to_phone(&slot, 3, peer, text("data"), None), Forward::Done));
    assert!(drain(&quiet).is_empty(), "no joined, left or replaced notice: {:?}", drain(&quiet));
}
