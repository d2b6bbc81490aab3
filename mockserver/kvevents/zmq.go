package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/sglmock/sglmock/compat"
)

// endSeq is the replay socket's end-of-replay marker: -1 as 8 bytes,
// big-endian (SGLang's END_SEQ).
var endSeq = binary.BigEndian.AppendUint64(nil, ^uint64(0))

// dialRetry is how often a connecting PUB socket retries a subscriber that
// is not up yet, or gone: libzmq's default reconnect interval is 100 ms.
const dialRetry = 100 * time.Millisecond

// Start opens the sockets cfg names and starts a publisher on them that
// gathers events as rules' SGLang release does:
// "null" sends nothing; "zmq" binds or connects the PUB socket (Binds) and
// binds the replay ROUTER socket if one is configured. A connecting socket
// keeps trying in the background until the subscriber is up, and
// reconnects when it goes, as libzmq's connect does. A binding socket on
// every interface is logged as a warning: its events carry the prompts'
// token ids.
func Start(cfg Config, topic string, rules compat.Rules, logger *slog.Logger) (*Publisher, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Publisher == "null" {
		return NewPublisher(cfg, topic, rules, nullTransport{}, logger), nil
	}
	t, err := openZMQ(cfg, logger)
	if err != nil {
		return nil, err
	}
	p := NewPublisher(cfg, topic, rules, t, logger)
	if t.replayLn != nil {
		t.replay = newReplaySocket(p.ring, logger)
		t.replay.serve(t.replayLn)
	}
	return p, nil
}

type nullTransport struct{}

func (nullTransport) Send([]byte, uint64, []byte) error { return nil }
func (nullTransport) Subscriptions() []string           { return nil }
func (nullTransport) Close() error                      { return nil }

// zmqTransport is the PUB socket and the optional replay ROUTER socket.
type zmqTransport struct {
	cancel   context.CancelFunc
	pub      *pubSocket
	pubLn    net.Listener // nil when the socket connects
	replay   *replaySocket
	replayLn net.Listener
}

func openZMQ(cfg Config, logger *slog.Logger) (*zmqTransport, error) {
	ctx, cancel := context.WithCancel(context.Background())
	t := &zmqTransport{cancel: cancel, pub: newPubSocket(cfg.HWM, logger)}
	network, addr, err := socketAddr(cfg.Endpoint)
	if err != nil {
		cancel()
		return nil, err
	}
	if cfg.Binds() {
		if t.pubLn, err = listen(network, addr); err != nil {
			cancel()
			return nil, fmt.Errorf("kv events: bind %s: %w", cfg.Endpoint, err)
		}
		warnWildcard(logger, "endpoint", cfg.Endpoint, network, addr)
		t.pub.serve(t.pubLn)
	} else {
		t.pub.dial(ctx, network, addr)
	}
	if cfg.ReplayEndpoint != nil {
		network, addr, err := socketAddr(*cfg.ReplayEndpoint)
		if err == nil {
			t.replayLn, err = listen(network, addr)
		}
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("kv events: bind replay %s: %w", *cfg.ReplayEndpoint, err)
		}
		warnWildcard(logger, "replay_endpoint", *cfg.ReplayEndpoint, network, addr)
	}
	return t, nil
}

// socketAddr is a ZMQ endpoint as a Go network and address: tcp://HOST:PORT
// ("*" for every interface or an ephemeral port) or ipc://PATH.
func socketAddr(ep string) (network, addr string, err error) {
	scheme, rest, _ := strings.Cut(ep, "://")
	switch scheme {
	case "ipc":
		return "unix", rest, nil
	case "tcp":
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return "", "", fmt.Errorf("kv events: %s: want tcp://HOST:PORT", ep)
		}
		host, port := strings.Trim(rest[:i], "[]"), rest[i+1:]
		if host == "*" {
			host = ""
		}
		if port == "*" {
			port = "0"
		}
		return "tcp", net.JoinHostPort(host, port), nil
	}
	return "", "", fmt.Errorf("kv events: %s: the publisher serves tcp:// and ipc:// endpoints", ep)
}

// listen binds addr. An ipc:// path left by a process that died is a
// socket nothing listens on; it is removed first, as libzmq's bind does,
// so a restart does not fail on it. A path that is not a socket is left
// alone.
func listen(network, addr string) (net.Listener, error) {
	if network == "unix" {
		if fi, err := os.Lstat(addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if c, err := net.Dial("unix", addr); err == nil {
				c.Close() // a live socket: Listen reports it in use
			} else {
				os.Remove(addr)
			}
		}
	}
	return net.Listen(network, addr)
}

// warnWildcard warns of a socket bound on every interface.
func warnWildcard(logger *slog.Logger, key, ep, network, addr string) {
	if network != "tcp" {
		return
	}
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return
	}
	logger.Warn(fmt.Sprintf(`KV events: %s %s listens on every interface, and its events carry the prompts' token ids; `+
		`for a router on this machine bind loopback only: "%s": "tcp://127.0.0.1:%s"%s`,
		key, ep, key, port, map[bool]string{true: `, "bind": true`, false: ""}[key == "endpoint"]))
}

func (t *zmqTransport) Send(topic []byte, seq uint64, payload []byte) error {
	t.pub.send(string(topic), func() []byte { return appendMessage(nil, topic, SeqBytes(seq), payload) })
	return nil
}

func (t *zmqTransport) Subscriptions() []string { return t.pub.topics() }

// counts are the sockets' drops and cuts, for Publisher.Stats.
func (t *zmqTransport) counts(st *Stats) {
	st.Subscribers = t.pub.subscribers()
	st.SubscriberDrops = t.pub.drops.Load()
	st.SubscribersCut = t.pub.cut.Load()
	if t.replay != nil {
		st.ReplayClientsCut = t.replay.cut.Load()
		st.ReplayMalformed = t.replay.malformed.Load()
	}
}

func (t *zmqTransport) Close() error {
	t.cancel()
	var err error
	if t.pubLn != nil {
		err = t.pubLn.Close()
	}
	if t.replayLn != nil {
		err = errors.Join(err, t.replayLn.Close())
	}
	t.pub.close()
	if t.replay != nil {
		t.replay.close()
		t.replay.wg.Wait()
	}
	t.pub.wg.Wait()
	return err
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
