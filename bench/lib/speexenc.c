/* Speex narrowband encoding and nothing else, for comparing builds of libspeex (bench/speex_builds.sh).
 *
 *   speexenc QUALITY IN.raw OUT   8 kHz 16-bit raw PCM in, raw 20 ms frames out (complexity 2,
 *                                 VBR off, as strowger and Asterisk encode); prints the thread CPU
 *                                 µs per frame of the encoding alone.
 */
#include <speex/speex.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: speexenc QUALITY IN.raw OUT\n");
        return 2;
    }
    int quality = atoi(argv[1]), complexity = 2;
    FILE *in = fopen(argv[2], "rb"), *out = fopen(argv[3], "wb");
    if (!in || !out) {
        perror("speexenc");
        return 1;
    }
    void *enc = speex_encoder_init(speex_lib_get_mode(SPEEX_MODEID_NB));
    speex_encoder_ctl(enc, SPEEX_SET_QUALITY, &quality);
    speex_encoder_ctl(enc, SPEEX_SET_COMPLEXITY, &complexity);
    SpeexBits bits;
    speex_bits_init(&bits);
    short pcm[160];
    char frame[200];
    long frames = 0;
    double us = 0;
    while (fread(pcm, sizeof pcm[0], 160, in) == 160) {
        double t0 = now_us();
        speex_bits_reset(&bits);
        speex_encode_int(enc, pcm, &bits);
        speex_bits_insert_terminator(&bits);
        int n = speex_bits_write(&bits, frame, sizeof frame);
        us += now_us() - t0;
        fwrite(frame, 1, n, out);
        frames++;
    }
    printf("%ld frames, %.2f us per 20 ms frame\n", frames, us / (frames ? frames : 1));
    return 0;
}
