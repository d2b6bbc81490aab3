package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/mockserver/profile"
)

func TestCalibrateCommand(t *testing.T) {
	dir := t.TempDir()
	rows := filepath.Join(dir, "original.csv")
	os.WriteFile(rows, []byte("ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n"+
		"1024,1407,0.46,0.20,1,17,true\n8192,11382,3.86,1.57,1,17,true\n32768,45507,23.72,4.26,1,17,true\n"), 0o644)
	// Three rows leave the formulas one degree of freedom and no table: the
	// formulas' misfit is more than the rows' noise explains, which the
	// exit status says; the profile is written anyway.
	out := filepath.Join(dir, "kimi-measured.yaml")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"calibrate", "--csv", rows, "-o", out, "--base", "kimi-k2.6-rtx6000"}, &stdout, &stderr); code != 1 {
		t.Fatalf("got exit %d, want 1: %s", code, stderr.String())
	}
	for _, want := range []string{"decode:  formula:", "MORE than the rows' noise explains", "wrote " + out} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, stdout.String())
		}
	}
	if want := "sglmock calibrate: no form the rows allow is within their noise (χ² 91.9, its 99 % quantile 6.6); the profile was written anyway\n"; stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	// --table passes through every row, and says that it checks nothing.
	stdout.Reset()
	if code := run([]string{"calibrate", "--csv", rows, "-o", out, "--base", "kimi-k2.6-rtx6000", "--table"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--table: got exit %d, want 0: %s", code, stderr.String())
	}
	for _, want := range []string{"decode:  ctx_table of 3 points", "45507", "7 parameters for 6 distinct legs pass through every row by construction"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--table: report lacks %q:\n%s", want, stdout.String())
		}
	}
	p, err := profile.Load(out)
	if err != nil {
		t.Fatalf("the written profile does not load: %v", err)
	}
	if p.Name != "kimi-measured" || p.Prefill.OverheadS <= 0 || *p.Calibration != (profile.Calibration{MinPromptTokens: 1407, MaxPromptTokens: 45507}) {
		t.Fatalf("got %+v (calibration %+v), want the file's base name, fitted costs, calibrated on 1407..45507", p, p.Calibration)
	}
	text, _ := os.ReadFile(out)
	if want := "# Fitted by sglmock calibrate from original.csv: 3 rows, 6 legs used, base profile\n#   kimi-k2.6-rtx6000.\n"; !strings.HasPrefix(string(text), want) {
		t.Errorf("the profile starts %q, want %q", text[:min(len(text), 120)], want)
	}

	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.46,0.20,1,17,false\n"), 0o644)
	// The original benchmark's rows as bench writes them, and a repeat whose
	// leg a found the first run's prompt: one run, so its t_a is that cached
	// leg's own, and the fit uses it as the prefill of one token it was.
	poisoned := filepath.Join(dir, "poisoned.csv")
	os.WriteFile(poisoned, []byte("ctx_req,prompt_tok,t_a,t_b,a,b,b_cached,a_cached,cached_a,cached_b,verdict,cause\n"+
		"1024,1407,0.46,0.20,1,17,true,false,0,1406,POISONED,leg b reused 1406 of 1407 prompt tokens (cached_tokens)\n"+
		"8192,11382,0.07,1.57,1,17,true,true,11381,11381,POISONED,leg a reused 11381 of 11382 prompt tokens (cached_tokens)\n"+
		"32768,45507,23.72,4.26,1,17,true,false,0,45506,POISONED,leg b reused 45506 of 45507 prompt tokens (cached_tokens)\n"), 0o644)
	var errs bytes.Buffer
	if code := run([]string{"calibrate", "--csv", poisoned, "-o", "-", "--base", "kimi-k2.6-rtx6000", "--table"}, &bytes.Buffer{}, &errs); code != 0 {
		t.Errorf("calibrate of poisoned rows: got exit %d, want 0: %s", code, errs.String())
	}
	if want := "  line 3 (ctx 8192, 11382 tokens): a: 1 token after 11381 cached; b: 1 token after 11381 cached, 16 decoded\n"; !strings.Contains(errs.String(), want) {
		t.Errorf("calibrate of poisoned rows said %q, want it to contain %q", errs.String(), want)
	}
	twoSizes := filepath.Join(dir, "two.csv")
	os.WriteFile(twoSizes, []byte("ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.46,0.6,1,17,false\n8192,11382,3.86,4.1,1,17,false\n"), 0o644)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"calibrate"}, 2, "--csv or --json is required"},
		{[]string{"calibrate", "--csv", rows, "--json", rows, "-o", "-"}, 2, "--csv and --json: give one of them"},
		{[]string{"calibrate", "--csv", rows}, 2, "-o is required"},
		{[]string{"calibrate", "--csv", filepath.Join(dir, "none.csv"), "-o", "-"}, 2, "no such file"},
		{[]string{"calibrate", "--csv", rows, "-o", "-", "--base", "nosuch"}, 2, `no built-in profile "nosuch"`},
		{[]string{"calibrate", "--csv", rows, "-o", "-", "--page-size", "0"}, 2, "page_size = 0"},
		{[]string{"calibrate", "--csv", rows, "-o", "-", "--predict", "1024,x"}, 2, `--predict "1024,x": "x" is not a prompt size`},
		{[]string{"calibrate", "--csv", rows, "-o", "-", "--base", "kimi-k2.6-rtx6000", "--predict", "300000"}, 2,
			"predict 300000: the base profile kimi-k2.6-rtx6000 takes prompts of 2..199983 tokens with b = 17 (context_length 200000)"},
		{[]string{"calibrate", "--csv", bad, "-o", "-"}, 2, "line 2: t_b = 0.2 <= t_a = 0.46"},
		{[]string{"calibrate", "--csv", twoSizes, "-o", "-", "--base", "kimi-k2.6-rtx6000"}, 2, "too few rows: 4 usable leg(s) at 2 prompt size(s)"},
		{[]string{"calibrate", "--json", rows, "-o", "-"}, 2, "original.csv: not a bench report"},
	} {
		var stderr bytes.Buffer
		if code := run(tt.args, &bytes.Buffer{}, &stderr); code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%q: got exit %d and %q, want exit %d and %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
}
