use codec::gsm::{GsmDecoder, GsmEncoder};
fn main() {
    let mut x = 5u32;
    let pcm: Vec<i16> = (0..160 * 3000).map(|i| { x = x.wrapping_mul(1664525).wrapping_add(1013904223); (((i as f64) * 0.05).sin() * 8000.0) as i16 + ((x >> 20) as i16 - 2048) }).collect();
    let mut e = GsmEncoder::new();
    let frames: Vec<[u8; 33]> = pcm.chunks_exact(160).map(|f| { let mut o = [0u8; 33]; e.encode(f.try_into().unwrap(), &mut o); o }).collect();
    let mut out = [0i16; 160];
    for _ in 0..40 {
        let mut d = GsmDecoder::new();
        for f in &frames { std::hint::black_box(d.decode(f, &mut out)).ok(); }
    }
}
