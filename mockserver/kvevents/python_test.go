package kvevents

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sglmock/sglmock/compat"
)

// debianPython finds a Python with Debian's python3-zmq and python3-msgpack:
// /usr/bin/python3 first (a pyenv or venv python3 on PATH often lacks
// them), then python3 on PATH.
func debianPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import zmq, msgpack").Run() == nil {
			return py
		}
	}
	t.Skip("no python3 with the zmq and msgpack modules (Debian: apt-get install python3-zmq python3-msgpack): " +
		"the independent decoder test needs them")
	return ""
}

// expectedJSON is a batch as Python's msgpack.unpackb then json.dumps
// show it, normalized through encoding/json.
func expectedJSON(t *testing.T, b Batch) string {
	t.Helper()
	events := []any{}
	for _, e := range b.Events {
		switch e.Kind {
		case BlockStored:
			var parent any
			if e.HasParent {
				parent = e.Parent
			}
			tokens := []any{}
			for i := 0; i < len(e.Tokens); i++ {
				if e.Bigram {
					tokens = append(tokens, []any{e.Tokens[i], e.Tokens[i+1]})
					i++
				} else {
					tokens = append(tokens, e.Tokens[i])
				}
			}
			events = append(events, []any{"BlockStored", e.Hashes, parent, tokens, e.BlockSize, nil, "GPU"})
		case BlockRemoved:
			events = append(events, []any{"BlockRemoved", e.Hashes, "GPU"})
		case AllBlocksCleared:
			events = append(events, []any{"AllBlocksCleared"})
		}
	}
	js, err := json.Marshal([]any{events, b.DPRank})
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

type pyLine struct {
	Topic     string          `json:"topic"`
	Seq       int64           `json:"seq"`
	Batch     json.RawMessage `json:"batch"`
	Canonical bool            `json:"canonical"`
}

// pythonJSON normalizes what Python printed: ts apart, the rest through
// encoding/json with exact numbers.
func pythonJSON(t *testing.T, raw json.RawMessage) (float64, string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v []any
	if err := dec.Decode(&v); err != nil || len(v) != 3 {
		t.Fatalf("python batch %s: %v", raw, err)
	}
	ts, err := v[0].(json.Number).Float64()
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v[1:])
	if err != nil {
		t.Fatal(err)
	}
	return ts, string(js)
}

// TestPythonDecodesEvents has pyzmq and msgpack-python, an implementation
// independent of this package's, subscribe in both modes, decode every
// message and check msgpack re-encodes it to the very bytes sent; then ask
// the replay socket for the buffered messages.
func TestPythonDecodesEvents(t *testing.T) {
	py := debianPython(t)
	batches := []Batch{
		{TS: 1700000000.25, Events: []Event{
			{Kind: AllBlocksCleared},
			{Kind: BlockStored, Hashes: []int64{3817746824117602890, -4216701448867210342}, Tokens: []int32{1, 2, 3, 4}, BlockSize: 2},
		}},
		{TS: 1700000001, Events: []Event{
			{Kind: BlockStored, Hashes: []int64{1267363100005438100}, Tokens: []int32{7, 100, 100, 101}, BlockSize: 2, Bigram: true},
			{Kind: BlockStored, Hashes: []int64{5}, Parent: -1, HasParent: true, Tokens: []int32{0, 127, 128, 255, 256, 65535, 65536, 1<<31 - 1}, BlockSize: 8},
			{Kind: BlockRemoved, Hashes: []int64{-4216701448867210342, 3817746824117602890}},
		}},
	}
	for _, bind := range []bool{true, false} {
		t.Run(fmt.Sprintf("replica binds=%v", bind), func(t *testing.T) {
			port, replayPort := freePort(t), freePort(t)
			pubEP, pyMode, pyEP := fmt.Sprintf("tcp://*:%d", port), "connect", fmt.Sprintf("tcp://127.0.0.1:%d", port)
			if !bind {
				pubEP, pyMode, pyEP = pyEP, "bind", pubEP
			}
			cfg := testConfig(pubEP)
			replayEP := fmt.Sprintf("tcp://*:%d", replayPort)
			cfg.ReplayEndpoint = &replayEP
			topic := RouterTopic("127.0.0.2", port, "org/"+t.Name())
			// The default release's rules: consecutive stores, and consecutive
			// removals, go out as one event each, as in the batches above.
			rules, err := compat.For(compat.Default)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Start(cfg, topic, rules, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			cmd := exec.Command(py, "testdata/subscriber.py", pyMode, pyEP, fmt.Sprint(len(batches)),
				fmt.Sprintf("tcp://127.0.0.1:%d", replayPort), "1")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			lines := bufio.NewScanner(out)
			lines.Buffer(nil, 1<<20)
			if !lines.Scan() || lines.Text() != "ready" {
				t.Fatalf("python: %q, stderr %s", lines.Text(), stderr.String())
			}
			waitFor(t, "python's subscription", func() bool { return slices.Contains(p.Subscriptions(), "kv@") })
			// python subscribes to "kv@": a publisher of another test process
			// reaching its port would show as a wrong topic below.
			for _, b := range batches {
				for _, e := range b.Events {
					switch e.Kind {
					case BlockStored:
						p.Stored(e.Parent, e.HasParent, e.Pages())
					case BlockRemoved:
						p.Removed(e.Pages())
					case AllBlocksCleared:
						p.Cleared()
					}
				}
				sec := int64(b.TS)
				p.Publish(time.Unix(sec, int64((b.TS-float64(sec))*1e9)))
			}
			// The live messages, then the replay from seq 1.
			for i, want := range append(slices.Clone(batches), batches[1]) {
				if !lines.Scan() {
					t.Fatalf("python stopped after %d lines: %s", i, stderr.String())
				}
				var l pyLine
				if err := json.Unmarshal(lines.Bytes(), &l); err != nil {
					t.Fatalf("python line %q: %v", lines.Text(), err)
				}
				wantTopic, wantSeq := topic, int64(i)
				if i == len(batches) {
					wantTopic, wantSeq = "", 1
				}
				ts, got := pythonJSON(t, l.Batch)
				if l.Topic != wantTopic || l.Seq != wantSeq || ts != want.TS || got != expectedJSON(t, want) || !l.Canonical {
					t.Errorf("message %d: python got topic %q seq %d ts %v canonical %v\n %s\nwant topic %q seq %d ts %v canonical true\n %s",
						i, l.Topic, l.Seq, ts, l.Canonical, got, wantTopic, wantSeq, want.TS, expectedJSON(t, want))
				}
			}
			if !lines.Scan() || lines.Text() != "end" {
				t.Errorf("python after the replay: %q, stderr %s", lines.Text(), stderr.String())
			}
		})
	}
}
