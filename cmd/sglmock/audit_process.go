package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/term"
)

// groupGrace is how long the command's process group has, after the
// command ends, to end on a SIGTERM before it is killed.
const groupGrace = 2 * time.Second

// runCommand runs CMD in a process group of its own with env, forwarding
// its output and the signals this process gets to the whole group, and
// returns its exit status (128+N when a signal N ended it). When it ends,
// whatever it left running in its group (a child it forked) is ended too:
// SIGTERM, then SIGKILL after groupGrace. On a terminal in which audit is
// in the foreground, the command's group takes the foreground while it
// runs, so that it may read the terminal, and gives it back. An error
// means CMD could not be started.
func runCommand(command []string, env []string, stdout, stderr io.Writer) (int, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = env
	cmd.Stdin = os.Stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	tty := foregroundTerminal()
	if tty {
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, 0
	}
	var copies sync.WaitGroup
	var readEnds []*os.File
	outFile, outRead, err := childOutput(stdout, &copies)
	if err != nil {
		return 0, err
	}
	errFile, errRead := outFile, (*os.File)(nil)
	if !sameWriter(stdout, stderr) {
		if errFile, errRead, err = childOutput(stderr, &copies); err != nil {
			return 0, err
		}
	}
	readEnds = append(readEnds, outRead, errRead)
	cmd.Stdout, cmd.Stderr = outFile, errFile
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	startErr := cmd.Start()
	// The child has its own copies of the pipes' write ends now.
	if outRead != nil {
		outFile.Close()
	}
	if errRead != nil {
		errFile.Close()
	}
	if startErr != nil {
		closeAll(readEnds)
		copies.Wait()
		return 0, fmt.Errorf("starting %q: %w", command[0], startErr)
	}
	pgid := cmd.Process.Pid
	done := make(chan struct{})
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		for {
			select {
			case s := <-sigs:
				syscall.Kill(-pgid, s.(syscall.Signal))
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	<-forwarded
	if tty {
		takeForeground()
	}
	endGroup(pgid)
	// Once the group is gone, nothing writes to the output any more; a
	// process that left the group (setsid) and holds it is not waited for
	// past the grace.
	waitOrClose(&copies, readEnds, groupGrace)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	return 0, err
}

// childOutput is the file the command writes w through: w itself when it
// is a file, else a pipe whose read end is copied to w.
func childOutput(w io.Writer, copies *sync.WaitGroup) (child, read *os.File, err error) {
	if f, ok := w.(*os.File); ok {
		return f, nil, nil
	}
	r, wr, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	copies.Add(1)
	go func() {
		defer copies.Done()
		io.Copy(w, r)
	}()
	return wr, r, nil
}

// sameWriter tells whether two writers are the same one, which then gets
// one pipe, written by one copy at a time (as exec.Cmd does).
func sameWriter(a, b io.Writer) (same bool) {
	defer func() { recover() }() // writers of types that cannot be compared
	return a == b
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// waitOrClose waits for the output copies, closing the read ends after
// grace if something still holds the write ends.
func waitOrClose(copies *sync.WaitGroup, readEnds []*os.File, grace time.Duration) {
	ended := make(chan struct{})
	go func() {
		copies.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(grace):
		closeAll(readEnds)
		<-ended
	}
	closeAll(readEnds)
}

// endGroup ends what is left of the process group pgid: SIGTERM, and
// SIGKILL for what is still there after groupGrace.
func endGroup(pgid int) {
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return // nothing left
	}
	deadline := time.Now().Add(groupGrace)
	for time.Now().Before(deadline) {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// foregroundTerminal tells whether stdin is a terminal whose foreground
// process group is this process's.
func foregroundTerminal() bool {
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return false
	}
	var fg int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, os.Stdin.Fd(), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&fg))); errno != 0 {
		return false
	}
	return int(fg) == syscall.Getpgrp()
}

// takeForeground makes this process's group the terminal's foreground
// again; a background group doing so is sent SIGTTOU, ignored meanwhile.
func takeForeground() {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	pgrp := int32(syscall.Getpgrp())
	syscall.Syscall(syscall.SYS_IOCTL, os.Stdin.Fd(), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&pgrp)))
}
