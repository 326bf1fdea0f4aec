//! Frames captured from llama.cpp 0c1e570's own client and server (see the
//! header of `tests/data/captured_session.txt`): every frame is decoded by our
//! protocol code and re-encoded byte for byte.

#[path = "common/frames.rs"]
mod frames;

fn load() -> Vec<frames::Frame> {
    frames::parse(include_str!("data/captured_session.txt"))
}

#[test]
fn captured_frames_decode_and_reencode_byte_for_byte() {
    let frames = load();
    assert!(frames.iter().any(|f| f.name == "GRAPH_COMPUTE"));
    frames::check_reencode(&frames, |g| assert!(!g.nodes.is_empty()));
}
