/* libopus itself, coding 8 kHz audio at 8 kHz: the reference strowger's Opus path from a
 * narrowband leg is scored against (tests/process/quality.rs). Raw 16-bit mono 8 kHz samples
 * in, 20 ms frames encoded with strowger's default settings (VoIP, 24 kbit/s, complexity 5,
 * in-band FEC for 5 % loss, no DTX), each decoded at once by a decoder at 8 kHz, raw samples out.
 *
 *   opus_8k IN.raw OUT.raw
 *
 * Build: cc -O2 -o opus_8k opus_8k.c -lopus
 */
#include <opus/opus.h>
#include <stdio.h>
#include <string.h>

#define FRAME 160

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: opus_8k IN.raw OUT.raw\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) {
        perror(in ? argv[2] : argv[1]);
        return 1;
    }
    int err;
    OpusEncoder *enc = opus_encoder_create(8000, 1, OPUS_APPLICATION_VOIP, &err);
    OpusDecoder *dec = err == OPUS_OK ? opus_decoder_create(8000, 1, &err) : NULL;
    if (!dec || opus_encoder_ctl(enc, OPUS_SET_BITRATE(24000)) ||
        opus_encoder_ctl(enc, OPUS_SET_COMPLEXITY(5)) ||
        opus_encoder_ctl(enc, OPUS_SET_INBAND_FEC(1)) ||
        opus_encoder_ctl(enc, OPUS_SET_PACKET_LOSS_PERC(5)) ||
        opus_encoder_ctl(enc, OPUS_SET_DTX(0))) {
        fprintf(stderr, "libopus refused: %s\n", opus_strerror(err));
        return 1;
    }
    opus_int16 pcm[FRAME], back[FRAME];
    unsigned char packet[1275];
    size_t n;
    while ((n = fread(pcm, sizeof pcm[0], FRAME, in)) > 0) {
        memset(pcm + n, 0, (FRAME - n) * sizeof pcm[0]);
        int len = opus_encode(enc, pcm, FRAME, packet, sizeof packet);
        int got = len > 0 ? opus_decode(dec, packet, len, back, FRAME, 0) : len;
        if (got != FRAME) {
            fprintf(stderr, "libopus: %s\n", opus_strerror(got));
            return 1;
        }
        fwrite(back, sizeof back[0], FRAME, out);
    }
    opus_encoder_destroy(enc);
    opus_decoder_destroy(dec);
    return fclose(out) != 0;
}
