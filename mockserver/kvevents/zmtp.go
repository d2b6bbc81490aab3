package kvevents

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// The ZMTP 3.0 wire (RFC 23/ZMTP) as the publisher's own sockets speak
// it, with the NULL mechanism: a 64-byte greeting each way, a READY command
// each way naming the socket types, then frames. Every size the peer sends
// is checked against a bound before it sizes a buffer, the handshake has a
// deadline, and a frame past its bound ends the connection: a peer can
// cost the publisher only what the bounds allow.

// ErrPeer is a peer that broke the protocol or a bound.
var ErrPeer = errors.New("kv events: bad ZMTP peer")

const (
	greetingLen = 64
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04

	// handshakeTimeout bounds the greeting and READY exchange, which a
	// real peer completes in a few round trips; a peer that connects and
	// says nothing is dropped after it.
	handshakeTimeout = 3 * time.Second
	// maxCommandBytes bounds a command's body (READY's metadata).
	maxCommandBytes = 64 << 10
)

// greeting is ours: signature, version 3.0, mechanism NULL, as-server 0.
var greeting = func() []byte {
	g := make([]byte, greetingLen)
	g[0], g[9] = 0xFF, 0x7F
	g[10], g[11] = 3, 0
	copy(g[12:32], "NULL")
	return g
}()

// zmtpConn is a connection after the handshake.
type zmtpConn struct {
	net.Conn
	r        *bufio.Reader
	peerType string
}

// handshake exchanges greetings and READY commands over c as a socket of
// type ours, accepting a peer whose type compatible allows.
func handshake(c net.Conn, ours string, compatible func(peer string) bool) (*zmtpConn, error) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(greeting); err != nil {
		return nil, err
	}
	z := &zmtpConn{Conn: c, r: bufio.NewReader(c)}
	var peer [greetingLen]byte
	if _, err := io.ReadFull(z.r, peer[:]); err != nil {
		return nil, err
	}
	mech := string(peer[12:32])
	switch {
	case peer[0] != 0xFF || peer[9] != 0x7F:
		return nil, fmt.Errorf("%w: not a ZMTP greeting", ErrPeer)
	case peer[10] < 3:
		return nil, fmt.Errorf("%w: ZMTP %d.%d; the publisher speaks 3.0 and later", ErrPeer, peer[10], peer[11])
	case mech != "NULL"+string(make([]byte, 16)):
		return nil, fmt.Errorf("%w: security mechanism %q; the publisher offers NULL", ErrPeer, trimNUL(mech))
	}
	if _, err := c.Write(appendCommand(nil, "READY", appendProperty(nil, "Socket-Type", ours))); err != nil {
		return nil, err
	}
	name, data, err := z.readCommand()
	if err != nil {
		return nil, err
	}
	if name != "READY" {
		return nil, fmt.Errorf("%w: %q where READY was due", ErrPeer, name)
	}
	props, err := parseProperties(data)
	if err != nil {
		return nil, err
	}
	z.peerType = props["socket-type"]
	if !compatible(z.peerType) {
		return nil, fmt.Errorf("%w: a %s socket cannot talk to a %s", ErrPeer, z.peerType, ours)
	}
	return z, nil
}

func trimNUL(s string) string {
	for len(s) > 0 && s[len(s)-1] == 0 {
		s = s[:len(s)-1]
	}
	return s
}

// readFrame reads one frame of at most max bytes.
func (z *zmtpConn) readFrame(max int) (flags byte, body []byte, err error) {
	if flags, err = z.r.ReadByte(); err != nil {
		return 0, nil, err
	}
	var size uint64
	if flags&flagLong != 0 {
		var b [8]byte
		if _, err := io.ReadFull(z.r, b[:]); err != nil {
			return 0, nil, err
		}
		size = binary.BigEndian.Uint64(b[:])
	} else {
		b, err := z.r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		size = uint64(b)
	}
	if size > uint64(max) {
		return 0, nil, fmt.Errorf("%w: a frame of %d bytes, past the %d this socket takes", ErrPeer, size, max)
	}
	body = make([]byte, size)
	_, err = io.ReadFull(z.r, body)
	return flags, body, err
}

// readCommand reads one command frame.
func (z *zmtpConn) readCommand() (name string, data []byte, err error) {
	flags, body, err := z.readFrame(maxCommandBytes)
	if err != nil {
		return "", nil, err
	}
	if flags&flagCommand == 0 || len(body) == 0 || int(body[0]) > len(body)-1 {
		return "", nil, fmt.Errorf("%w: a malformed command", ErrPeer)
	}
	return string(body[1 : 1+body[0]]), body[1+body[0]:], nil
}

// readMessage reads one message or command of at most maxFrames frames of
// at most maxFrame bytes each.
func (z *zmtpConn) readMessage(maxFrames, maxFrame int) (frames [][]byte, command bool, err error) {
	for {
		flags, body, err := z.readFrame(maxFrame)
		if err != nil {
			return nil, false, err
		}
		if flags&flagCommand != 0 {
			if len(frames) > 0 {
				return nil, false, fmt.Errorf("%w: a command inside a message", ErrPeer)
			}
			return [][]byte{body}, true, nil
		}
		if len(frames) == maxFrames {
			return nil, false, fmt.Errorf("%w: a message of more than %d frames", ErrPeer, maxFrames)
		}
		frames = append(frames, body)
		if flags&flagMore == 0 {
			return frames, false, nil
		}
	}
}

// appendFrame appends one frame: its header and body.
func appendFrame(b []byte, flags byte, body []byte) []byte {
	return append(appendFrameHeader(b, flags, len(body)), body...)
}

// appendFrameHeader appends a frame's header: flags and size (1 byte, or
// 8 for a long frame).
func appendFrameHeader(b []byte, flags byte, size int) []byte {
	if size > 255 {
		b = append(b, flags|flagLong)
		return binary.BigEndian.AppendUint64(b, uint64(size))
	}
	return append(b, flags, byte(size))
}

// appendMessage appends a message of the given frames.
func appendMessage(b []byte, frames ...[]byte) []byte {
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		b = appendFrame(b, flags, f)
	}
	return b
}

func appendCommand(b []byte, name string, data []byte) []byte {
	body := append([]byte{byte(len(name))}, name...)
	return appendFrame(b, flagCommand, append(body, data...))
}

func appendProperty(b []byte, name, value string) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// parseProperties reads READY's metadata; names are case-insensitive, so
// they are lowered.
func parseProperties(b []byte) (map[string]string, error) {
	props := map[string]string{}
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+4 {
			return nil, fmt.Errorf("%w: malformed READY metadata", ErrPeer)
		}
		name := b[1 : 1+n]
		size := binary.BigEndian.Uint32(b[1+n:])
		b = b[1+n+4:]
		if uint64(size) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: malformed READY metadata", ErrPeer)
		}
		props[strings.ToLower(string(name))] = string(b[:size])
		b = b[size:]
	}
	return props, nil
}

// errStalled is a write that made no progress for its stall time.
var errStalled = errors.New("kv events: the peer read nothing for the stall time")

// stallChecks is how many times per stall time a blocked write looks for
// progress.
const stallChecks = 4

// writeAll writes bufs to c, which should be the bare connection so that
// net.Buffers goes out in writev calls, and fails with errStalled once it
// makes no progress for stall. A peer that reads slowly but steadily gets
// everything however long it takes in all; one that stops reading is cut
// between stall and stall*(1+1/stallChecks) after its last read, as the
// kernel reports progress only when a deadline ends a write.
func writeAll(c net.Conn, bufs net.Buffers, stall time.Duration) error {
	last := time.Now()
	for {
		deadline := time.Now().Add(stall / stallChecks)
		if end := last.Add(stall); end.Before(deadline) {
			deadline = end
		}
		c.SetWriteDeadline(deadline)
		n, err := bufs.WriteTo(c)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return err
		case n > 0:
			last = time.Now()
		case !time.Now().Before(last.Add(stall)):
			return errStalled
		}
	}
}

// acceptEach runs handle, on a goroutine of its own counted in wg, for
// every connection ln accepts, until ln closes. A failing Accept (EMFILE
// and the like) is retried after a pause, never in a spin.
func acceptEach(wg *sync.WaitGroup, ln net.Listener, handle func(net.Conn)) {
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			wg.Go(func() { handle(c) })
		}
	})
}
