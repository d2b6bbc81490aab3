package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/sglmock/sglmock/harness"
)

// console shows a run as it goes: each row as it finishes (a sweep to
// 192k tokens takes minutes on real hardware), and, when stderr is a
// terminal, a status line under the rows: the legs done, the leg in flight,
// the time spent and the time left. The status line is cleared before a
// row is written and drawn again after it, so the two never mix.
type console struct {
	mu    sync.Mutex
	table *harness.TableWriter
	// status is where the status line goes; nil when stderr is not a
	// terminal (a pipe, a file, a test): then only the rows are written.
	status io.Writer
	width  func() int
	now    func() time.Time

	legs, done int
	desc       string
	eta        harness.ETA
	etaAt      time.Time
	start      time.Time
	shown      bool
	ticker     *time.Ticker
	quit       chan struct{}
	wg         sync.WaitGroup
	err        error
}

// newConsole writes the rows on out, as a compact table or a wide one, and
// a status line on stderr when it is a terminal.
func newConsole(out, stderr io.Writer, wide bool) *console {
	c := &console{table: harness.NewTableWriter(out, wide), now: time.Now, width: func() int { return 80 }}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		c.status = f
		c.width = func() int {
			if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
				return w
			}
			return 80
		}
	}
	return c
}

// Start starts the clock and, on a terminal, redraws the status line
// every second, so that the time left counts down during a long leg.
func (c *console) Start(legs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.legs, c.start = legs, c.now()
	if c.status == nil || c.ticker != nil {
		return
	}
	c.ticker, c.quit = time.NewTicker(time.Second), make(chan struct{})
	c.wg.Go(func() {
		for {
			select {
			case <-c.ticker.C:
				c.mu.Lock()
				c.draw()
				c.mu.Unlock()
			case <-c.quit:
				return
			}
		}
	})
}

func (c *console) Leg(desc string, left harness.ETA) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.desc, c.eta, c.etaAt = desc, left, c.now()
	c.draw()
}

func (c *console) Done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done++
	c.draw()
}

// Row writes the rows that finished since the last call.
func (c *console) Row(rep *harness.Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
	if err := c.table.Write(rep); err != nil && c.err == nil {
		c.err = err
	}
	c.draw()
}

// Finish stops the status line and clears it.
func (c *console) Finish() {
	c.mu.Lock()
	if c.ticker != nil {
		c.ticker.Stop()
		close(c.quit)
		c.ticker = nil
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
}

// Close writes any row not written yet (rep may be nil) and the last
// table's notes, and returns the first error writing the table.
func (c *console) Close(rep *harness.Report) error {
	c.Finish()
	c.mu.Lock()
	defer c.mu.Unlock()
	if rep != nil {
		if err := c.table.Write(rep); err != nil && c.err == nil {
			c.err = err
		}
	}
	if err := c.table.Close(); err != nil && c.err == nil {
		c.err = err
	}
	return c.err
}

func (c *console) clear() {
	if c.shown {
		io.WriteString(c.status, "\r\033[K")
		c.shown = false
	}
}

// draw writes the status line over the last one. The caller holds mu.
func (c *console) draw() {
	if c.status == nil || c.legs == 0 {
		return
	}
	now := c.now()
	line := statusLine(c.done, c.legs, c.desc, now.Sub(c.start), c.eta, now.Sub(c.etaAt))
	if w := c.width() - 1; len(line) > w {
		line = line[:max(w, 0)]
	}
	io.WriteString(c.status, "\r\033[K"+line)
	c.shown = true
}

// statusLine is "legs 5/12: flush+nonce ctx 8192 leg b | 1m02s elapsed |
// ETA 3m40s"; sinceETA is the time since the ETA was predicted, counted off
// it. An ETA fitted to the legs done (a server without a cost model) is
// marked as such; none is shown before there is one.
func statusLine(done, legs int, desc string, elapsed time.Duration, eta harness.ETA, sinceETA time.Duration) string {
	parts := []string{fmt.Sprintf("legs %d/%d: %s", done, legs, desc), clock(elapsed) + " elapsed"}
	left := clock(max(eta.Left-sinceETA, 0))
	switch eta.Source {
	case harness.ETAModel:
		parts = append(parts, "ETA "+left)
	case harness.ETAMeasured:
		parts = append(parts, "ETA ~"+left+" (fitted to the legs so far)")
	}
	return strings.Join(parts, " | ")
}

// clock renders a duration to the second: "42s", "3m40s", "1h02m05s".
func clock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm%02ds", s/3600, s/60%60, s%60)
}
