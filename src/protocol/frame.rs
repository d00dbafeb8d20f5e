//! The one frame type inside voxa: a WebSocket data message as it travels from a socket to a
//! session and back. Sockets convert at their edge ([`Frame::from_message`], `Message::from`);
//! both conversions move the buffer, so audio is never copied on the way.

use tokio_tungstenite::tungstenite::Message;
pub use tokio_tungstenite::tungstenite::{Bytes, Utf8Bytes};

use super::AgentMessage;

/// One data message: a text frame (JSON of the application protocol) or a binary frame (audio,
/// and in round 3 sealed frames). `Debug` shows the kind and length only: text frames carry
/// proofs and bearers.
#[derive(Clone, PartialEq, Eq)]
pub enum Frame {
    Text(Utf8Bytes),
    Binary(Bytes),
}

impl Frame {
    /// A text frame.
    pub fn text(text: impl Into<Utf8Bytes>) -> Self {
        Frame::Text(text.into())
    }

    /// A binary frame.
    pub fn binary(data: impl Into<Bytes>) -> Self {
        Frame::Binary(data.into())
    }

    /// The data frame of a socket message; a control message (ping, pong, close) is given back.
    pub fn from_message(message: Message) -> Result<Self, Message> {
        match message {
            Message::Text(text) => Ok(Frame::Text(text)),
            Message::Binary(data) => Ok(Frame::Binary(data)),
            other => Err(other),
        }
    }

    /// The text of a text frame.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Frame::Text(text) => Some(text.as_str()),
            Frame::Binary(_) => None,
        }
    }

    /// Bytes of payload.
    pub fn len(&self) -> usize {
        match self {
            Frame::Text(text) => text.len(),
            Frame::Binary(data) => data.len(),
        }
    }

    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Frame> for Message {
    fn from(frame: Frame) -> Self {
        match frame {
            Frame::Text(text) => Message::Text(text),
            Frame::Binary(data) => Message::Binary(data),
        }
    }
}

impl From<&AgentMessage> for Frame {
    fn from(message: &AgentMessage) -> Self {
        Frame::text(message.to_json())
    }
}

impl From<AgentMessage> for Frame {
    fn from(message: AgentMessage) -> Self {
        Frame::from(&message)
    }
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Frame::Text(text) => write!(f, "Frame::Text({} bytes)", text.len()),
            Frame::Binary(data) => write!(f, "Frame::Binary({} bytes)", data.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_at_the_socket_edge_move_the_buffer() {
        let audio = Bytes::from(vec![1u8; 4096]);
        let address = audio.as_ptr();
        let Message::Binary(sent) = Message::from(Frame::Binary(audio)) else { panic!("not binary") };
        assert_eq!(sent.as_ptr(), address, "audio is not copied into the socket message");
        let Ok(Frame::Binary(back)) = Frame::from_message(Message::Binary(sent)) else { panic!("not binary") };
        assert_eq!(back.as_ptr(), address, "nor out of it");
        assert_eq!(Frame::from_message(Message::text("hi")), Ok(Frame::text("hi")));
        assert!(matches!(Frame::from_message(Message::Ping(Bytes::new())), Err(Message::Ping(_))));
    }

    #[test]
    fn debug_never_shows_the_payload() {
        let bearer = Frame::text(r#"{"type":"bearer","bearer":"vbx_secret"}"#);
        let shown = format!("{bearer:?}");
        assert!(!shown.contains("vbx_secret") && shown.contains("bytes"), "{shown}");
        assert_eq!(bearer.as_text().map(str::len), Some(bearer.len()));
        assert!(Frame::binary(Vec::new()).is_empty());
    }
}
