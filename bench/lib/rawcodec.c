/* The raw library cost of a transcoding step, for comparison with strowger's translator
 * (`strowger codec transcode`): the same coded file, each 20 ms frame decoded and re-encoded by
 * direct calls to libgsm and libspeex with the settings strowger uses (Speex narrowband,
 * quality 8, complexity 2, decoder enhancement on), nothing else in the loop. Prints the thread
 * CPU time per 20 ms frame.
 *
 *   rawcodec gsm-speex FILE.gsm [OUT]   33-byte GSM 06.10 frames -> Speex NB (raw frames to OUT)
 *   rawcodec speex-gsm FILE.spx         38-byte Speex NB (quality 8) raw frames -> GSM 06.10
 *
 * Build: gcc -O2 -o rawcodec rawcodec.c -lgsm -lspeex
 */
#include <gsm.h>
#include <speex/speex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4 || (strcmp(argv[1], "gsm-speex") && strcmp(argv[1], "speex-gsm"))) {
        fprintf(stderr, "usage: rawcodec gsm-speex FILE.gsm [OUT.spx] | speex-gsm FILE.spx\n");
        return 2;
    }
    int to_speex = !strcmp(argv[1], "gsm-speex");
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    static unsigned char data[64 << 20];
    size_t len = fread(data, 1, sizeof data, f);
    fclose(f);
    size_t in_bytes = to_speex ? 33 : 38;
    size_t frames = len / in_bytes;

    gsm g = gsm_create();
    void *enc = speex_encoder_init(&speex_nb_mode), *dec = speex_decoder_init(&speex_nb_mode);
    int q = 8, c = 2, enh = 1;
    speex_encoder_ctl(enc, SPEEX_SET_QUALITY, &q);
    speex_encoder_ctl(enc, SPEEX_SET_COMPLEXITY, &c);
    speex_decoder_ctl(dec, SPEEX_SET_ENH, &enh);
    SpeexBits bits;
    speex_bits_init(&bits);
    short pcm[160];
    char out[200];
    static char coded[64 << 20];
    size_t coded_len = 0;
    unsigned long sink = 0;

    double t0 = cpu_us();
    for (size_t i = 0; i < frames; i++) {
        unsigned char *p = data + i * in_bytes;
        if (to_speex) {
            gsm_decode(g, p, pcm);
            speex_bits_reset(&bits);
            speex_encode_int(enc, pcm, &bits);
            int n = speex_bits_write(&bits, out, sizeof out);
            if (coded_len + n <= sizeof coded) {
                memcpy(coded + coded_len, out, n);
                coded_len += n;
            }
            sink += n;
        } else {
            speex_bits_read_from(&bits, (char *)p, in_bytes);
            speex_decode_int(dec, &bits, pcm);
            gsm_encode(g, pcm, (gsm_byte *)out);
            sink += out[0];
        }
    }
    double us = cpu_us() - t0;
    printf("%s: %zu frames, %.0f us of CPU, %.2f us per 20 ms frame (%lu)\n", argv[1], frames, us,
           us / (frames ? frames : 1), sink % 10);
    if (argc == 4) {
        FILE *o = fopen(argv[3], "wb");
        if (!o || fwrite(coded, 1, coded_len, o) != coded_len) {
            perror(argv[3]);
            return 1;
        }
        fclose(o);
    }
    gsm_destroy(g);
    speex_encoder_destroy(enc);
    speex_decoder_destroy(dec);
    speex_bits_destroy(&bits);
    return 0;
}
