package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// endSeq is the replay socket's end-of-replay marker: -1 as 8 bytes,
// big-endian (SGLang's END_SEQ).
var endSeq = binary.BigEndian.AppendUint64(nil, ^uint64(0))

// dialRetry is how often a connecting PUB socket retries a subscriber that
// is not up yet, or gone: libzmq's default reconnect interval is 100 ms.
const dialRetry = 100 * time.Millisecond

// Start opens the sockets cfg names and starts a publisher on them:
// "null" sends nothing; "zmq" binds or connects the PUB socket (Binds),
// with the high-water mark, and binds the replay ROUTER socket if one is
// configured. A connecting socket keeps trying in the background until the
// subscriber is up, and reconnects when it goes, as libzmq's connect does;
// the connection stays open for the publisher's life.
func Start(cfg Config, topic string, logger *slog.Logger) (*Publisher, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Publisher == "null" {
		return NewPublisher(cfg, topic, nullTransport{}, logger), nil
	}
	t, err := openZMQ(cfg, logger)
	if err != nil {
		return nil, err
	}
	p := NewPublisher(cfg, topic, t, logger)
	if t.replay != nil {
		go t.serveReplay(p)
	}
	return p, nil
}

type nullTransport struct{}

func (nullTransport) Send([]byte, uint64, []byte) error { return nil }
func (nullTransport) Subscriptions() []string           { return nil }
func (nullTransport) Close() error                      { return nil }

// zmqTransport is the PUB socket and the optional replay ROUTER socket.
type zmqTransport struct {
	ctx    context.Context
	cancel context.CancelFunc
	pub    zmq4.Socket
	replay zmq4.Socket
	log    *slog.Logger
	dialed chan struct{} // closed when a connecting socket's dial loop ends
}

// zmqLogger routes zmq4's own log lines to the logger at debug level.
func zmqLogger(l *slog.Logger) *log.Logger {
	return log.New(logWriter{l}, "", 0)
}

type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(b []byte) (int, error) {
	w.l.Debug("zmq4: " + strings.TrimSpace(string(b)))
	return len(b), nil
}

func openZMQ(cfg Config, logger *slog.Logger) (*zmqTransport, error) {
	ctx, cancel := context.WithCancel(context.Background())
	t := &zmqTransport{ctx: ctx, cancel: cancel, log: logger}
	t.pub = zmq4.NewPub(ctx, zmq4.WithLogger(zmqLogger(logger)), zmq4.WithDialerMaxRetries(0))
	if cfg.HWM > 0 {
		if err := t.pub.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
			cancel()
			return nil, fmt.Errorf("kv events: hwm: %w", err)
		}
	}
	if cfg.Binds() {
		if err := t.pub.Listen(cfg.Endpoint); err != nil {
			cancel()
			return nil, fmt.Errorf("kv events: bind %s: %w", cfg.Endpoint, err)
		}
	} else {
		hostport, ok := strings.CutPrefix(cfg.Endpoint, "tcp://")
		if !ok {
			cancel()
			return nil, fmt.Errorf("kv events: %s: a connecting endpoint must be tcp://HOST:PORT", cfg.Endpoint)
		}
		t.dialed = make(chan struct{})
		go t.keepConnected(hostport)
	}
	if cfg.ReplayEndpoint != nil {
		t.replay = zmq4.NewRouter(ctx, zmq4.WithLogger(zmqLogger(logger)))
		if err := t.replay.Listen(*cfg.ReplayEndpoint); err != nil {
			t.Close()
			return nil, fmt.Errorf("kv events: bind replay %s: %w", *cfg.ReplayEndpoint, err)
		}
	}
	return t, nil
}

// keepConnected dials the subscriber, waits for the connection to end,
// and dials again, every dialRetry while it is down, until the transport
// closes: libzmq's connect, whose connection stays open and comes back.
// zmq4's own reconnect gives up when a dial reaches a listener that is
// closing, so the dials go through the watched transport instead.
func (t *zmqTransport) keepConnected(hostport string) {
	defer close(t.dialed)
	retry := time.NewTimer(0)
	defer retry.Stop()
	down := false
	for {
		select {
		case <-retry.C:
		case <-t.ctx.Done():
			return
		}
		id, ended := watchedDials.add()
		err := t.pub.Dial(watchedScheme + "://" + hostport + "/" + id)
		if err == nil {
			down = false
			select {
			case <-ended:
			case <-t.ctx.Done():
			}
		} else if !down && t.ctx.Err() == nil {
			down = true
			t.log.Info(fmt.Sprintf("KV events: the subscriber at %s is not up yet (%v); retrying every %v", hostport, err, dialRetry))
		}
		watchedDials.remove(id)
		retry.Reset(dialRetry)
	}
}

func (t *zmqTransport) Send(topic []byte, seq uint64, payload []byte) error {
	return t.pub.SendMulti(zmq4.NewMsgFrom(topic, SeqBytes(seq), payload))
}

func (t *zmqTransport) Subscriptions() []string {
	if tp, ok := t.pub.(zmq4.Topics); ok {
		return tp.Topics()
	}
	return nil
}

func (t *zmqTransport) Close() error {
	t.cancel()
	err := t.pub.Close()
	if t.replay != nil {
		err = errors.Join(err, t.replay.Close())
	}
	if t.dialed != nil {
		<-t.dialed
	}
	return err
}

// replayRetry is the pause after a failed receive on the replay socket.
const replayRetry = 10 * time.Millisecond

// serveReplay answers replay requests, [identity, "", start seq], with
// every buffered message from start on, [identity, "", seq, payload], then
// the end marker [identity, "", -1, ""], as SGLang's _service_replay. It
// runs on its own goroutine, so a slow replay client never holds up the
// publisher.
func (t *zmqTransport) serveReplay(p *Publisher) {
	for {
		msg, err := t.replay.Recv()
		if err != nil {
			// A failing socket is retried after a pause, never in a spin.
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(replayRetry):
			}
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			t.log.Warn(fmt.Sprintf("KV events: invalid replay request of %d frames", len(msg.Frames)))
			continue
		}
		id := msg.Frames[0]
		start := binary.BigEndian.Uint64(msg.Frames[2])
		for _, b := range p.Replay(start) {
			if err := t.replay.SendMulti(zmq4.NewMsgFrom(id, nil, SeqBytes(b.Seq), b.Payload)); err != nil {
				break
			}
		}
		t.replay.SendMulti(zmq4.NewMsgFrom(id, nil, endSeq, nil))
	}
}

// watchedScheme is a tcp transport registered with zmq4 whose connections
// tell, by a channel, when they end: the address is HOST:PORT/ID, ID naming
// the dial's channel in watchedDials.
const watchedScheme = "sglmock-watched-tcp"

func init() {
	if err := zmq4.RegisterTransport(watchedScheme, watchedTransport{}); err != nil {
		panic(err)
	}
}

var watchedDials = dialRegistry{ends: map[string]chan struct{}{}}

type dialRegistry struct {
	mu   sync.Mutex
	next uint64
	ends map[string]chan struct{}
}

func (r *dialRegistry) add() (string, chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	id := strconv.FormatUint(r.next, 10)
	ch := make(chan struct{})
	r.ends[id] = ch
	return id, ch
}

func (r *dialRegistry) get(id string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ends[id]
}

func (r *dialRegistry) remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ends, id)
}

type watchedTransport struct{}

func (watchedTransport) Addr(ep string) (string, error) {
	hostport, id, ok := strings.Cut(ep, "/")
	if !ok || id == "" {
		return "", fmt.Errorf("kv events: %q: want HOST:PORT/ID", ep)
	}
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		return "", err
	}
	return ep, nil
}

func (watchedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	hostport, id, _ := strings.Cut(addr, "/")
	c, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, ended: watchedDials.get(id)}, nil
}

func (watchedTransport) Listen(context.Context, string) (net.Listener, error) {
	return nil, errors.New("kv events: the watched transport only dials")
}

// watchedConn closes ended when its connection fails or closes.
type watchedConn struct {
	net.Conn
	ended chan struct{}
	once  sync.Once
}

func (c *watchedConn) end() {
	if c.ended != nil {
		c.once.Do(func() { close(c.ended) })
	}
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.end()
	}
	return n, err
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil {
		c.end()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.end()
	return c.Conn.Close()
}

// Message is one message as a subscriber receives it.
type Message struct {
	Topic   string
	Seq     uint64
	Payload []byte
}

// Subscriber is the receiving end, a SUB socket, as a router runs it:
// connected to a replica that binds, or bound for replicas that connect.
type Subscriber struct {
	sock   zmq4.Socket
	cancel context.CancelFunc
}

// Subscribe opens a SUB socket on endpoint for topics starting with
// prefix: it binds when bind is set, else it connects (retrying until the
// publisher is up).
func Subscribe(endpoint, prefix string, bind bool) (*Subscriber, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscriber{sock: zmq4.NewSub(ctx, zmq4.WithDialerRetry(dialRetry), zmq4.WithDialerMaxRetries(-1)), cancel: cancel}
	if err := s.sock.SetOption(zmq4.OptionSubscribe, prefix); err != nil {
		s.Close()
		return nil, err
	}
	var err error
	if bind {
		err = s.sock.Listen(endpoint)
	} else {
		err = s.sock.Dial(endpoint)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("kv events: subscribe %s: %w", endpoint, err)
	}
	return s, nil
}

// Addr is the address a binding subscriber listens on.
func (s *Subscriber) Addr() net.Addr { return s.sock.Addr() }

// Recv waits for the next message.
func (s *Subscriber) Recv() (Message, error) {
	msg, err := s.sock.Recv()
	if err != nil {
		return Message{}, err
	}
	if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 {
		return Message{}, fmt.Errorf("%w: a message of %d frames", ErrMalformed, len(msg.Frames))
	}
	return Message{Topic: string(msg.Frames[0]), Seq: binary.BigEndian.Uint64(msg.Frames[1]), Payload: msg.Frames[2]}, nil
}

// Close closes the socket.
func (s *Subscriber) Close() error {
	s.cancel()
	return s.sock.Close()
}

// RequestReplay asks a replay socket for the messages from sequence number
// from on and returns them, up to the end marker.
func RequestReplay(endpoint string, from uint64) ([]Message, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial(endpoint); err != nil {
		return nil, err
	}
	if err := d.SendMulti(zmq4.NewMsgFrom(nil, SeqBytes(from))); err != nil {
		return nil, err
	}
	var out []Message
	for {
		msg, err := d.Recv()
		if err != nil {
			return out, err
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 {
			return out, fmt.Errorf("%w: a replay message of %d frames", ErrMalformed, len(msg.Frames))
		}
		if string(msg.Frames[1]) == string(endSeq) {
			return out, nil
		}
		out = append(out, Message{Seq: binary.BigEndian.Uint64(msg.Frames[1]), Payload: msg.Frames[2]})
	}
}
