use super::*;

fn ulaw(value: i16) -> Vec<u8> {
    vec![G711::Pcmu.encode_sample(value); FRAME]
}

/// Feeds `frames` 20 ms frames each way (`a` received, `b` sent), the tap advanced after each
/// as the media pass does, then ends the recording.
fn record(mix: Mix, a: i16, b: i16, frames: u32) -> (Vec<i16>, Arc<RecordingStatus>) {
    let t0 = Instant::now();
    let (mut tap, rec) = Tap::new(Format::Pcmu, mix, t0);
    for i in 0..frames {
        let now = t0 + FRAME_TIME * i;
        tap.received(&ulaw(a));
        tap.sent(&ulaw(b));
        tap.advance(now);
    }
    tap.finish(t0 + FRAME_TIME * frames);
    let pcm = rec.blocks.try_iter().flatten().collect();
    (pcm, rec.status)
}

#[test]
fn stereo_puts_the_caller_left_and_the_other_side_right() {
    let (pcm, status) = record(Mix::Stereo, 1000, -2000, 50);
    let (l, r) = (
        G711::Pcmu.decode_sample(ulaw(1000)[0]),
        G711::Pcmu.decode_sample(ulaw(-2000)[0]),
    );
    assert_eq!(pcm.len(), 50 * FRAME * 2);
    assert!(pcm.chunks(2).all(|s| s == [l, r]), "{:?}", &pcm[..8]);
    assert!(status.complete());
    assert_eq!(status.duration(), Duration::from_secs(1));
}

#[test]
fn mono_adds_both_sides_and_saturates() {
    let (pcm, _) = record(Mix::Mono, 30000, 30000, 10);
    assert_eq!(pcm.len(), 10 * FRAME);
    assert!(pcm.iter().all(|&s| s == i16::MAX));
    let (pcm, _) = record(Mix::Mono, -30000, -30000, 10);
    assert!(pcm.iter().all(|&s| s == i16::MIN));
    let (pcm, _) = record(Mix::Mono, 1000, -1000, 10);
    let sum = i32::from(G711::Pcmu.decode_sample(ulaw(1000)[0]))
        + i32::from(G711::Pcmu.decode_sample(ulaw(-1000)[0]));
    assert!(pcm.iter().all(|&s| i32::from(s) == sum));
}

#[test]
fn time_without_audio_is_recorded_as_silence() {
    let t0 = Instant::now();
    let (mut tap, rec) = Tap::new(Format::Pcma, Mix::Stereo, t0);
    tap.advance(t0 + Duration::from_secs(1));
    tap.finish(t0 + Duration::from_secs(2));
    let pcm: Vec<i16> = rec.blocks.try_iter().flatten().collect();
    assert_eq!(pcm.len(), 2 * 8000 * 2);
    assert!(pcm.iter().all(|&s| s == 0));
    assert_eq!(rec.status.duration(), Duration::from_secs(2));
}

#[test]
fn a_writer_that_falls_behind_marks_the_recording_incomplete() {
    let t0 = Instant::now();
    let (mut tap, rec) = Tap::new(Format::Pcmu, Mix::Mono, t0);
    let queued = FRAME_TIME * (QUEUE_BLOCKS * BLOCK_FRAMES) as u32;
    tap.advance(t0 + queued + FRAME_TIME * LAG_FRAMES as u32);
    assert!(rec.status.complete(), "the queue holds its blocks");
    tap.advance(t0 + queued + Duration::from_secs(1));
    assert!(!rec.status.complete());
    // What was queued is what the file gets, and what the duration says.
    assert_eq!(rec.status.duration(), queued);
    assert_eq!(rec.blocks.try_iter().count(), QUEUE_BLOCKS);
}

#[test]
fn wideband_audio_is_recorded_at_8_khz() {
    let t0 = Instant::now();
    let (mut tap, rec) = Tap::new(Format::L16Wide, Mix::Mono, t0);
    // 20 ms of 16 kHz linear PCM (big-endian), a constant.
    let payload: Vec<u8> = std::iter::repeat_n(4000i16.to_be_bytes(), 320)
        .flatten()
        .collect();
    for i in 0..10 {
        tap.received(&payload);
        tap.advance(t0 + FRAME_TIME * i);
    }
    tap.finish(t0 + FRAME_TIME * 10);
    let pcm: Vec<i16> = rec.blocks.try_iter().flatten().collect();
    assert_eq!(pcm.len(), 10 * FRAME);
    let settled = &pcm[FRAME..9 * FRAME];
    assert!(
        settled.iter().all(|&s| (3900..=4100).contains(&s)),
        "{:?}",
        &settled[..8]
    );
}

/// Each frame's own value, for telling frames apart.
fn frame_value(i: u32) -> i16 {
    G711::Pcmu.decode_sample(G711::Pcmu.encode_sample((i as i16 % 64) * 400 - 12000))
}

#[test]
fn frames_land_in_order_across_blocks_and_laps_of_the_ring() {
    let t0 = Instant::now();
    let (mut tap, rec) = Tap::new(Format::Pcmu, Mix::Stereo, t0);
    let frames = 150; // 3 s: six blocks, the ring lapped three times
    let mut pcm: Vec<i16> = Vec::new();
    for i in 0..frames {
        let now = t0 + FRAME_TIME * i;
        tap.received(&ulaw(frame_value(i)));
        tap.sent(&ulaw(frame_value(i + 7)));
        tap.advance(now);
        // The writer keeps up.
        pcm.extend(rec.blocks.try_iter().flatten());
    }
    tap.finish(t0 + FRAME_TIME * frames);
    pcm.extend(rec.blocks.try_iter().flatten());
    assert_eq!(pcm.len(), frames as usize * FRAME * 2);
    for (i, frame) in pcm.chunks(FRAME * 2).enumerate() {
        let (l, r) = (frame_value(i as u32), frame_value(i as u32 + 7));
        assert!(frame.chunks(2).all(|s| s == [l, r]), "frame {i}");
    }
    assert!(rec.status.complete());
}

#[test]
fn a_direction_ahead_of_the_clock_keeps_half_a_second_and_resumes_at_the_cut() {
    let t0 = Instant::now();
    let (mut tap, rec) = Tap::new(Format::Pcmu, Mix::Mono, t0);
    // 40 frames at once: the first 25 (500 ms) are kept, the rest dropped.
    for i in 0..40 {
        tap.received(&ulaw(frame_value(i)));
    }
    // Silence until 1 s of call time is cut, then one more frame.
    tap.advance(t0 + Duration::from_secs(1) + FRAME_TIME * LAG_FRAMES as u32);
    tap.received(&ulaw(frame_value(60)));
    tap.finish(t0 + Duration::from_secs(1) + FRAME_TIME);
    let pcm: Vec<i16> = rec.blocks.try_iter().flatten().collect();
    assert_eq!(pcm.len(), 51 * FRAME);
    for (i, frame) in pcm.chunks(FRAME).enumerate() {
        let want = match i {
            0..25 => frame_value(i as u32),
            50 => frame_value(60),
            _ => 0,
        };
        assert!(frame.iter().all(|&s| s == want), "frame {i}: {}", frame[0]);
    }
}

#[test]
fn a_later_lap_of_the_ring_holds_only_its_own_audio() {
    let t0 = Instant::now();
    let (mut tap, rec) = Tap::new(Format::Pcmu, Mix::Stereo, t0);
    let mut pcm: Vec<i16> = Vec::new();
    let frames = 150;
    for i in 0..frames {
        let now = t0 + FRAME_TIME * i;
        if i < 30 {
            tap.received(&ulaw(frame_value(i)));
        }
        if (70..80).contains(&i) {
            tap.sent(&ulaw(frame_value(i + 7)));
        }
        tap.advance(now);
        pcm.extend(rec.blocks.try_iter().flatten());
    }
    tap.finish(t0 + FRAME_TIME * frames);
    pcm.extend(rec.blocks.try_iter().flatten());
    assert_eq!(pcm.len(), frames as usize * FRAME * 2);
    for (i, frame) in pcm.chunks(FRAME * 2).enumerate() {
        let i = i as u32;
        let l = if i < 30 { frame_value(i) } else { 0 };
        // Sent after a silence: it resumes at the cut of the last advance (the frame before),
        // the lag behind, in slots the first lap filled on the left.
        let lag = LAG_FRAMES as u32 + 1;
        let r = match (70 - lag..80 - lag).contains(&i) {
            true => frame_value(i + lag + 7),
            false => 0,
        };
        assert!(
            frame.chunks(2).all(|s| s == [l, r]),
            "frame {i}: {:?}",
            &frame[..2]
        );
    }
}
