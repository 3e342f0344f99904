// The phone page's recorder, on the audio thread: it hands what the page hears to the page in
// blocks, so none is lost while the page's own thread is busy (a ScriptProcessor, which runs
// there, drops what it was late for).
'use strict';

const BLOCK = 4096;

class Recorder extends AudioWorkletProcessor {
  constructor() {
    super();
    this.block = new Float32Array(BLOCK);
    this.n = 0;
  }

  process(inputs) {
    const samples = inputs[0][0];
    if (samples) {
      for (const s of samples) {
        this.block[this.n] = s;
        this.n += 1;
        if (this.n === BLOCK) {
          this.port.postMessage(this.block, [this.block.buffer]);
          this.block = new Float32Array(BLOCK);
          this.n = 0;
        }
      }
    }
    return true;
  }
}

registerProcessor('recorder', Recorder);
