// strowger's phone page: a softphone on JsSIP (bundled into the binary at build time) that
// talks SIP over the WebSocket of the listener that served it, so it needs no Origin setting
// and, over wss, one acceptance of the server's certificate. It registers, dials, answers, hangs
// up, sends digits as RFC 4733 events, and shows the microphone's and the speaker's levels.
// What it hears is kept (the last RECORD_S seconds, by recorder.js on the audio thread) for
// `phone.received`, which tests read.
'use strict';

const $ = (id) => document.getElementById(id);
const RECORD_S = 10;
const wsPath = document.querySelector('meta[name="ws-path"]').content;
const server = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${wsPath}`;
// No STUN or TURN: strowger's WebRTC legs are ICE-lite with their own candidates.
const pcConfig = { iceServers: [] };
const media = { audio: true, video: false };

let ua = null;
let session = null;
let audio = null;
const sent = [];

/// The page's audio graph, made on the first click (browsers start audio on a user's gesture):
/// a level meter on each side, and a recorder of what is heard.
class Sound {
  constructor() {
    this.ctx = new AudioContext();
    this.mic = null;
    this.speaker = null;
    this.micTrack = null;
    // The nodes of the call in progress, disconnected when it ends: a graph that kept every
    // past call's would starve the recorder of samples.
    this.nodes = [];
    this.ring = new Float32Array(this.ctx.sampleRate * RECORD_S);
    this.written = 0;
    this.recorderLoaded = this.ctx.audioWorklet.addModule('recorder.js');
    setInterval(() => this.show(), 100);
  }

  /// An analyser on `stream`, its nodes kept with the call's.
  analyser(stream) {
    const a = this.ctx.createAnalyser();
    a.fftSize = 2048;
    const source = this.ctx.createMediaStreamSource(stream);
    source.connect(a);
    this.nodes.push(source, a);
    return a;
  }

  /// The microphone as sent: the track of the call's sender.
  listenMic(track) {
    if (track === this.micTrack) return;
    this.micTrack = track;
    this.mic = this.analyser(new MediaStream([track]));
  }

  /// What the far end sends: played by the <audio> element (Chromium feeds a remote stream
  /// to WebAudio only while a media element plays it), metered, and recorded.
  async listenRemote(stream) {
    $('remote').srcObject = stream;
    $('remote').play().catch(() => {});
    this.speaker = this.analyser(stream);
    await this.recorderLoaded;
    const recorder = new AudioWorkletNode(this.ctx, 'recorder');
    recorder.port.onmessage = (e) => this.keep(e.data);
    // Connected (silenced) to the output, so the audio thread runs it.
    const mute = this.ctx.createGain();
    mute.gain.value = 0;
    const source = this.ctx.createMediaStreamSource(stream);
    source.connect(recorder).connect(mute).connect(this.ctx.destination);
    this.nodes.push(source, recorder, mute);
    this.written = 0;
  }

  /// The call ended: its nodes go (what was recorded stays for `received`).
  hangUp() {
    for (const n of this.nodes) n.disconnect();
    this.nodes = [];
    this.mic = null;
    this.speaker = null;
    this.micTrack = null;
    $('remote').srcObject = null;
  }

  keep(samples) {
    for (const s of samples) {
      this.ring[this.written % this.ring.length] = s;
      this.written += 1;
    }
  }

  /// The last `seconds` heard, as 16-bit samples at the context's rate.
  received(seconds) {
    const n = Math.min(this.written, this.ring.length, Math.round(seconds * this.ctx.sampleRate));
    const out = new Array(n);
    for (let i = 0; i < n; i += 1) {
      const s = this.ring[(this.written - n + i) % this.ring.length];
      out[i] = Math.round(Math.max(-1, Math.min(1, s)) * 32767);
    }
    return { rate: this.ctx.sampleRate, samples: out };
  }

  show() {
    const sender = session && session.connection && session.connection.getSenders()[0];
    if (sender && sender.track) this.listenMic(sender.track);
    for (const [name, a] of [['mic', this.mic], ['speaker', this.speaker]]) {
      const db = a ? level(a) : -60;
      $(`${name}-level`).value = db;
      $(`${name}-db`).textContent = a ? `${db.toFixed(0)} dBFS` : '';
    }
  }
}

/// The RMS level of what `a` holds now, in dBFS (at least -60).
function level(a) {
  const x = new Float32Array(a.fftSize);
  a.getFloatTimeDomainData(x);
  const rms = Math.sqrt(x.reduce((sum, s) => sum + s * s, 0) / x.length);
  return Math.max(-60, 20 * Math.log10(rms || 1e-9));
}

function callStatus(text, error = false) {
  $('call-status').textContent = text;
  $('call-status').classList.toggle('error', error);
}

function buttons() {
  const registered = ua !== null && ua.isRegistered();
  const ringing = session !== null && session.direction === 'incoming' && !session.isEstablished();
  $('register').disabled = ua !== null;
  $('unregister').disabled = ua === null;
  $('call').disabled = !registered || session !== null;
  $('answer').disabled = !ringing;
  $('hangup').disabled = session === null;
}

/// Follows `s` (placed or received) until it ends.
function follow(s) {
  session = s;
  sent.length = 0;
  $('sent-digits').textContent = '';
  const who = s.remote_identity.uri.user;
  const onPc = (pc) => pc.addEventListener('track', (e) => {
    audio.listenRemote(e.streams[0] || new MediaStream([e.track]));
  });
  if (s.connection) onPc(s.connection);
  s.on('peerconnection', (e) => onPc(e.peerconnection));
  // Incoming, progress is our own 180 Ringing going out.
  const ringing = s.direction === 'incoming' ? `call from ${who}` : `ringing ${who}`;
  s.on('progress', () => callStatus(ringing));
  s.on('confirmed', () => callStatus(`in call with ${who}`));
  const end = (text, error) => () => {
    if (session === s) {
      session = null;
      audio.hangUp();
    }
    callStatus(text, error);
    buttons();
  };
  s.on('ended', (e) => end(`call with ${who} ended (${e.cause})`)());
  s.on('failed', (e) => end(`call with ${who} failed: ${e.cause}`, e.cause !== 'Canceled')());
  s.on('confirmed', buttons);
  buttons();
}

function register(event) {
  event.preventDefault();
  audio = audio || new Sound();
  const user = $('user').value.trim();
  const domain = $('domain').value.trim();
  const me = new JsSIP.UA({
    sockets: [new JsSIP.WebSocketInterface(server)],
    uri: `sip:${user}@${domain}`,
    password: $('password').value,
    user_agent: 'strowger phone page',
    register: true,
  });
  ua = me;
  // Events of a UA given up (unregistered, or refused) no longer speak for the page.
  const reg = (text, error = false) => {
    if (ua !== me) return;
    $('reg-status').textContent = text;
    $('reg-status').classList.toggle('error', error);
    buttons();
  };
  me.on('registered', () => reg(`registered as ${user}`));
  me.on('unregistered', () => reg('not registered'));
  me.on('disconnected', () => reg(`no connection to ${server}`, true));
  me.on('registrationFailed', (e) => {
    reg(`registration failed: ${e.cause}`, true);
    // Stopped, so the form can try again (another password, say).
    ua = null;
    me.stop();
    buttons();
  });
  me.on('newRTCSession', (e) => {
    if (e.originator !== 'remote') return;
    if (session !== null) {
      e.session.terminate({ status_code: 486, reason_phrase: 'Busy Here' });
      return;
    }
    follow(e.session);
    callStatus(`call from ${e.session.remote_identity.uri.user}`);
  });
  reg(`connecting to ${server}`);
  me.start();
}

function unregister() {
  if (session !== null) session.terminate();
  ua.stop();
  ua = null;
  $('reg-status').textContent = 'not registered';
  buttons();
}

function call() {
  const number = $('number').value.trim();
  if (number === '') return;
  audio = audio || new Sound();
  const target = `sip:${number}@${$('domain').value.trim()}`;
  follow(ua.call(target, { mediaConstraints: media, pcConfig }));
  callStatus(`calling ${number}`);
}

function answer() {
  session.answer({ mediaConstraints: media, pcConfig });
  buttons();
}

function hangup() {
  if (session !== null) session.terminate();
}

function key(digit) {
  if (session !== null && session.isEstablished()) {
    session.sendDTMF(digit, { transportType: 'RFC2833', duration: 120, interToneGap: 80 });
    sent.push(digit);
    $('sent-digits').textContent = `sent ${sent.join('')}`;
  } else {
    $('number').value += digit;
  }
}

$('domain').value = location.hostname;
$('account').addEventListener('submit', register);
$('unregister').addEventListener('click', unregister);
$('call').addEventListener('click', call);
$('number').addEventListener('keydown', (e) => { if (e.key === 'Enter' && !$('call').disabled) call(); });
$('answer').addEventListener('click', answer);
$('hangup').addEventListener('click', hangup);
for (const b of document.querySelectorAll('#keypad button')) {
  b.addEventListener('click', () => key(b.dataset.key));
}
buttons();

/// For tests and the curious: what the page heard.
window.phone = { received: (seconds) => (audio ? audio.received(seconds) : { rate: 0, samples: [] }) };
