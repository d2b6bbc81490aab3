package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/calibrate"
	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// deployment is a profile to measure: default's limits with costs of its
// own, which a calibration should find.
func deployment(t *testing.T) *profile.Profile {
	p := mocktest.Profile(t, "default")
	p.Prefill = profile.PrefillCost{OverheadS: 0.012, PerTokenS: 4.1e-5, AttentionS: 3.3e-10}
	p.Decode = profile.DecodeCost{StepOverheadS: 0.007, PerSeqS: 2e-5, PerCtxTokenS: 2.2e-9}
	return p
}

// benchOn runs bench twopoint with args against a mock of p, with
// deterministic request ids.
func benchOn(t *testing.T, p *profile.Profile, args []string, stdout, stderr io.Writer) int {
	t.Helper()
	m := mocktest.Start(t, api.Config{Profile: p})
	c := &harness.Client{HTTP: m.Client, BaseURL: m.URL, Backend: harness.SGLang}
	o, err := parseBenchFlags(append([]string{"twopoint"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	return bench(context.Background(), c, o, func() string { n++; return fmt.Sprintf("id-%d", n) }, stdout, stderr)
}

// bench --calibrate-after measures a deployment, fits a profile to the
// sweep, prints the fit's report (every leg measured against fitted, its
// leave-one-out error) and writes the profile, whose costs are the
// deployment's; calibrate --json reads the same sweep's report to the same
// profile.
func TestBenchCalibrateAfter(t *testing.T) {
	dir := t.TempDir()
	out, js := filepath.Join(dir, "measured.yaml"), filepath.Join(dir, "sweep.json")
	synctest.Test(t, func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		args := []string{"--url", "http://127.0.0.1:30000", "--ctx", "1000,4000,9000,20000", "--b", "65", "--repeat", "2",
			"--json", js, "--calibrate-after", out, "--predict", "30000"}
		if code := benchOn(t, deployment(t), args, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d, want 0\n%s%s", code, stdout.String(), stderr.String())
		}
		mocktest.Golden(t, "calibrate-after.txt", bytes.ReplaceAll(stdout.Bytes(), []byte(dir), []byte("DIR")))
	})
	p, err := profile.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	mocktest.CheckCosts(t, p, deployment(t), 1e-6)
	if p.Name != "measured" || *p.Calibration != (profile.Calibration{MinPromptTokens: 1000, MaxPromptTokens: 20000, Accuracy: 0.0001}) {
		t.Errorf("got %s calibrated %+v, want measured, on 1000..20000, within 0.01 %%", p.Name, p.Calibration)
	}
	var stdout, stderr bytes.Buffer
	again := filepath.Join(dir, "again.yaml")
	if code := run([]string{"calibrate", "--json", js, "-o", again, "--predict", "30000"}, &stdout, &stderr); code != 0 {
		t.Fatalf("calibrate --json: exit %d\n%s", code, stderr.String())
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	_, a, _ = bytes.Cut(a, []byte("\nname: "))
	_, b, _ = bytes.Cut(b, []byte("\nname: "))
	if !bytes.Equal(bytes.TrimPrefix(a, []byte("measured")), bytes.TrimPrefix(b, []byte("again"))) {
		t.Errorf("calibrate --json of the sweep wrote\n%s\nwant what --calibrate-after wrote\n%s", b, a)
	}
}

func TestBenchCalibrateAfterUsage(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "p.yaml")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--ctx", "1024,2048", "--calibrate-after", out}, "--calibrate-after needs --ctx at 3 prompt sizes or more"},
		{[]string{"--ctx", "1024,2048,4096", "--calibrate-after", out, "--dry-run", "--profile", "default"}, "--calibrate-after fits what a sweep measured, and --dry-run sends nothing"},
		{[]string{"--table"}, "--table is a flag of the fit: it only goes with --calibrate-after"},
		{[]string{"--predict", "4096"}, "--predict is a flag of the fit: it only goes with --calibrate-after"},
		{[]string{"--ctx", "1024,2048,4096", "--calibrate-after", "-", "--csv", "-"}, "--csv - and --calibrate-after - would both write to standard output"},
		{[]string{"--ctx", "1024,2048,4096", "--calibrate-after", out, "--predict", "x"}, `--predict "x": "x" is not a prompt size`},
		{[]string{"--ctx", "1024,2048,4096", "--calibrate-after", out, "--profile", "nosuch"}, `--profile: no built-in profile "nosuch"`},
		{[]string{"--ctx", "1024,2048,4096", "--calibrate-after", filepath.Join(dir, "no", "p.yaml")}, "--calibrate-after " + filepath.Join(dir, "no", "p.yaml") + ": no directory"},
	} {
		if _, err := parseBenchFlags(append([]string{"twopoint"}, tt.args...), io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.args, err, tt.want)
		}
	}
	// The base profile's flags go with --calibrate-after.
	o, err := parseBenchFlags([]string{"twopoint", "--ctx", "1024,2048,4096", "--calibrate-after", out, "--chunked-prefill-size", "16384", "--context-length", "65536"}, io.Discard)
	if err != nil || o.profile.Name != "default" || o.profile.ChunkedPrefillSize != 16384 || o.profile.ContextLength != 65536 {
		t.Errorf("got %v, %+v; want default with the flags as the base", err, o)
	}
}

// A dry run on a calibrated profile says which contexts lie past the
// prompts it was measured on.
func TestDryRunSaysItExtrapolates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "measured.yaml")
	p := deployment(t)
	p.Name = "measured"
	p.Calibration = &profile.Calibration{MinPromptTokens: 1024, MaxPromptTokens: 8192, Accuracy: 0.0412}
	os.WriteFile(path, p.YAML(), 0o644)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"bench", "twopoint", "--dry-run", "--profile", path, "--ctx", "4096,16384,24576"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := "\nProfile measured was calibrated on prompts of 1024..8192 tokens, where it predicts within ±4.1 %: " +
		"ctx 16384 (2.0x the longest), ctx 24576 (3.0x the longest) lie past them, an extrapolation.\n"
	if !strings.HasSuffix(stdout.String(), want) {
		t.Errorf("the dry run ends %q, want %q", stdout.String(), want)
	}
}

// Against a deployment whose every iteration varies (jitter 5 %), the
// legs' runs measure their noise: the report weighs each leg by it, and
// every fitted coefficient is within its stated 95 % half-width of the
// deployment's.
func TestBenchCalibrateAfterNoisy(t *testing.T) {
	dir := t.TempDir()
	out, js := filepath.Join(dir, "measured.yaml"), filepath.Join(dir, "sweep.json")
	truth := deployment(t)
	truth.Jitter = 0.05
	synctest.Test(t, func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		args := []string{"--url", "http://127.0.0.1:30000", "--ctx", "1000,2000,4000,9000,20000", "--b", "65", "--repeat", "3",
			"--json", js, "--calibrate-after", out}
		if code := benchOn(t, truth, args, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d, want 0\n%s%s", code, stdout.String(), stderr.String())
		}
		_, report, _ := strings.Cut(stdout.String(), "\ncalibrated on this sweep")
		mocktest.Golden(t, "calibrate-after-noisy.txt", []byte(strings.ReplaceAll(report, dir, "DIR")))
	})
	f, err := os.Open(js)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := calibrate.ReadJSON(f, "sweep.json")
	if err != nil {
		t.Fatal(err)
	}
	res, err := calibrate.Fit(rows, mocktest.Profile(t, "default"), calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{truth.Prefill.OverheadS, truth.Prefill.PerTokenS, truth.Prefill.AttentionS,
		truth.Decode.StepOverheadS + truth.Decode.PerSeqS, truth.Decode.PerCtxTokenS}
	for j, c := range res.Coefficients {
		if math.Abs(c.Value-want[j]) > c.Half*c.Value || c.Half == 0 {
			t.Errorf("%s: fitted %.4g ±%.1f %%, want the truth %.4g within it", c.Name, c.Value, 100*c.Half, want[j])
		}
	}
}
