package main

import (
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/sglmock/sglmock/harness"
)

// newProgress shows a progress bar on stderr when stderr is a terminal:
// a sweep to 192k tokens takes minutes on real hardware. Elsewhere (a
// pipe, a file, a test) it shows nothing.
func newProgress(stderr io.Writer) harness.Progress {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return harness.NoProgress{}
	}
	return &barProgress{w: f}
}

// barProgress counts legs and names the one in flight.
type barProgress struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (b *barProgress) Start(legs int) {
	b.bar = progressbar.NewOptions(legs,
		progressbar.OptionSetWriter(b.w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetDescription("legs"),
	)
}

func (b *barProgress) Leg(desc string) { b.bar.Describe(desc) }
func (b *barProgress) Done()           { b.bar.Add(1) }
func (b *barProgress) Finish()         { b.bar.Finish() }
