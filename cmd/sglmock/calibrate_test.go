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
	out := filepath.Join(dir, "kimi-measured.yaml")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"calibrate", "--csv", rows, "-o", out, "--base", "kimi-k2.6-rtx6000"}, &stdout, &stderr); code != 0 {
		t.Fatalf("got exit %d, want 0: %s", code, stderr.String())
	}
	for _, want := range []string{"decode:  ctx_table of 3 points", "45507", "largest residual 0.00 %, which checks nothing: 6 parameters for 6 measured legs", "wrote " + out} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, stdout.String())
		}
	}
	p, err := profile.Load(out)
	if err != nil {
		t.Fatalf("the written profile does not load: %v", err)
	}
	if p.Name != "kimi-measured" || p.Prefill.OverheadS <= 0 {
		t.Fatalf("got %+v, want the file's base name and fitted costs", p)
	}

	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n1024,1407,0.46,0.20,1,17,false\n"), 0o644)
	// The original benchmark's rows as bench writes them, and a repeat whose leg a found
	// the first run's prompt: dropped, which leaves two sizes.
	poisoned := filepath.Join(dir, "poisoned.csv")
	os.WriteFile(poisoned, []byte("ctx_req,prompt_tok,t_a,t_b,a,b,b_cached,a_cached,cached_a,cached_b,verdict,cause\n"+
		"1024,1407,0.46,0.20,1,17,true,false,0,1406,POISONED,leg b reused 1406 of 1407 prompt tokens (cached_tokens)\n"+
		"8192,11382,0.07,1.57,1,17,true,true,11381,11381,POISONED,leg a reused 11381 of 11382 prompt tokens (cached_tokens)\n"+
		"32768,45507,23.72,4.26,1,17,true,false,0,45506,POISONED,leg b reused 45506 of 45507 prompt tokens (cached_tokens)\n"), 0o644)
	var errs bytes.Buffer
	run([]string{"calibrate", "--csv", poisoned, "-o", "-", "--base", "kimi-k2.6-rtx6000"}, &bytes.Buffer{}, &errs)
	if want := "dropped line 3 (ctx 8192, 11382 tokens): leg a was served from the cache (a_cached, cached_a 11381 of 11382), and the fit takes leg a cold\n"; !strings.HasPrefix(errs.String(), want) {
		t.Errorf("calibrate of poisoned rows said %q, want it to start %q", errs.String(), want)
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"calibrate"}, 2, "--csv is required"},
		{[]string{"calibrate", "--csv", rows}, 2, "-o is required"},
		{[]string{"calibrate", "--csv", filepath.Join(dir, "none.csv"), "-o", "-"}, 2, "no such file"},
		{[]string{"calibrate", "--csv", rows, "-o", "-", "--base", "nosuch"}, 2, `no built-in profile "nosuch"`},
		{[]string{"calibrate", "--csv", rows, "-o", "-", "--page-size", "0"}, 2, "page_size = 0"},
		{[]string{"calibrate", "--csv", bad, "-o", "-"}, 2, "line 2: t_b = 0.2 <= t_a = 0.46"},
		{[]string{"calibrate", "--csv", poisoned, "-o", "-", "--base", "kimi-k2.6-rtx6000"}, 2, "too few rows: 2 row(s) at 2 prompt size(s)"},
	} {
		var stderr bytes.Buffer
		if code := run(tt.args, &bytes.Buffer{}, &stderr); code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%q: got exit %d and %q, want exit %d and %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
}
