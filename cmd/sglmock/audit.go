package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/profile"
)

const auditUsage = `Usage: sglmock audit [flags] -- CMD [ARGS...]

Starts a mock SGLang server on a free loopback port with an empty prefix
cache (no warmup request), runs CMD with the server's address in its
environment, forwarding CMD's output and the signals sglmock gets, then
reports from the server's own records every request (rid, prompt tokens,
cached tokens, the earlier request whose prefix it reused) and every
/flush_cache with its outcome.

CMD's environment gets:
  SGLANG_URL, SGLANG_BASE_URL   http://127.0.0.1:PORT
  OPENAI_BASE_URL, OPENAI_API_BASE   http://127.0.0.1:PORT/v1
  SGLANG_HOST, SGLANG_PORT      127.0.0.1 and PORT
  OPENAI_API_KEY                "sglmock", unless already set

Exit status: CMD's own when CMD failed; 1 (POISONED) when a request reused
more of an earlier request's prefix than every prompt shares on the server
(a BOS token, measured afterwards) plus --allow-shared-prefix, which means no
accepted flush came between them; 0 when clean; 2 for a usage error.

Flags:
`

type auditOptions struct {
	profile     *profile.Profile
	speedup     float64
	allowShared int
	jsonPath    string
	cfg         api.Config
	command     []string
}

func parseAuditFlags(args []string, stderr io.Writer) (*auditOptions, error) {
	fs := flag.NewFlagSet("sglmock audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &auditOptions{}
	profileName := fs.String("profile", "default", "cost profile: a built-in name (see 'sglmock profiles') or a YAML file")
	floatFlag(fs, &o.speedup, "speedup", 1, "`S` simulated seconds per wall second")
	fs.IntVar(&o.allowShared, "allow-shared-prefix", 0, "tolerate a reused prefix of up to N tokens (a shared system prompt)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the report as JSON to this file (for CI)")
	fs.BoolVar(&o.cfg.DisableRadixCache, "disable-radix-cache", false, "disable prefix caching: cached_tokens is always 0")
	fs.BoolVar(&o.cfg.EnableCacheReport, "enable-cache-report", false, "report usage.prompt_tokens_details.cached_tokens in OpenAI responses")
	fs.BoolVar(&o.cfg.EnableMetrics, "enable-metrics", false, "serve Prometheus metrics on /metrics")
	fs.IntVar(&o.cfg.StreamInterval, "stream-interval", 1, "send a stream event every N output tokens")
	profileFlags := profile.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, auditUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, true); err != nil {
		return nil, err
	}
	o.command = fs.Args()
	if len(o.command) == 0 {
		return nil, errors.New("no command to run: sglmock audit [flags] -- CMD [ARGS...]")
	}
	switch {
	case o.speedup <= 0 || o.speedup > 1e6:
		return nil, fmt.Errorf("--speedup %v: must be in (0, 1e6]", o.speedup)
	case o.allowShared < 0:
		return nil, fmt.Errorf("--allow-shared-prefix %d: must be >= 0", o.allowShared)
	case o.cfg.StreamInterval < 1:
		return nil, fmt.Errorf("--stream-interval %d: must be >= 1", o.cfg.StreamInterval)
	}
	p, err := loadProfile(*profileName, profileFlags)
	if err != nil {
		return nil, err
	}
	o.profile = p
	return o, nil
}

func runAudit(args []string, stdout, stderr io.Writer) int {
	o, err := parseAuditFlags(args, stderr)
	if code, done := flagExit("audit", err, stderr); done {
		return code
	}
	m, err := startLocalMock(o.profile, o.speedup, o.cfg)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock audit:", err)
		return 2
	}
	defer m.Close()
	fmt.Fprintf(stderr, "sglmock audit: mock %s (profile %s, x%g) at %s; running %q\n", api.SimVersion, o.profile.Name, o.speedup, m.URL, o.command)
	status, runErr := runCommand(o.command, m, stdout, stderr)
	if runErr != nil {
		fmt.Fprintln(stderr, "sglmock audit:", runErr)
		return 2
	}
	c := &harness.Client{HTTP: &http.Client{Timeout: 30 * time.Second}, BaseURL: m.URL, Backend: harness.SGLang}
	rep, err := harness.Audit(context.Background(), c, harness.AuditOptions{AllowSharedPrefix: harness.SharedPrefixAllowance{Tokens: o.allowShared}})
	if err != nil {
		fmt.Fprintln(stderr, "sglmock audit:", err)
		return 2
	}
	fmt.Fprintln(stdout)
	rep.WriteTable(stdout)
	if o.jsonPath != "" {
		if err := writeFile(o.jsonPath, rep.WriteJSON); err != nil {
			fmt.Fprintln(stderr, "sglmock audit:", err)
			return 2
		}
	}
	if status != 0 {
		fmt.Fprintf(stderr, "sglmock audit: the command failed with exit status %d; its figures are not to be trusted whatever the verdict\n", status)
		return status
	}
	if rep.Verdict.Level() == harness.Poisoned {
		return 1
	}
	return 0
}

// runCommand runs CMD with the mock's address in its environment,
// forwarding its output and the signals this process gets, and returns its
// exit status (128+N when a signal N ended it). An error means CMD could
// not be started.
func runCommand(command []string, m *localMock, stdout, stderr io.Writer) (int, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(),
		"SGLANG_URL="+m.URL, "SGLANG_BASE_URL="+m.URL,
		"OPENAI_BASE_URL="+m.URL+"/v1", "OPENAI_API_BASE="+m.URL+"/v1",
		"SGLANG_HOST=127.0.0.1", "SGLANG_PORT="+strconv.Itoa(m.Port))
	if os.Getenv("OPENAI_API_KEY") == "" {
		cmd.Env = append(cmd.Env, "OPENAI_API_KEY=sglmock")
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %q: %w", command[0], err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
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

// writeFile creates path and writes it with f.
func writeFile(path string, f func(io.Writer) error) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f(file); err != nil {
		file.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return file.Close()
}
