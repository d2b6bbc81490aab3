package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// --tokenizer-path loads a model directory's tokenizer; without it,
// --model-path does when it is a model directory or a model id in the
// local Hugging Face cache, and is only the model's name otherwise.
func TestServeTokenizerFlags(t *testing.T) {
	model := t.TempDir()
	mocktest.WriteTokenizer(t, model, "")
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	snap := filepath.Join(cache, "models--acme--tiny", "snapshots", "abc123")
	os.MkdirAll(filepath.Join(cache, "models--acme--tiny", "refs"), 0o755)
	os.WriteFile(filepath.Join(cache, "models--acme--tiny", "refs", "main"), []byte("abc123\n"), 0o644)
	os.MkdirAll(snap, 0o755)
	mocktest.WriteTokenizer(t, snap, "")
	empty := t.TempDir()
	tests := []struct {
		name    string
		args    []string
		wantTok string // the loaded tokenizer's directory; "" for the profile's
		wantErr string
	}{
		{"built-in", nil, "", ""},
		{"tokenizer path", []string{"--tokenizer-path", model}, model, ""},
		{"model path directory", []string{"--model-path", model}, model, ""},
		{"tokenizer path wins", []string{"--model-path", empty, "--tokenizer-path", model}, model, ""},
		{"model id in the cache", []string{"--model-path", "acme/tiny"}, snap, ""},
		{"model id elsewhere is a name", []string{"--model-path", "meta-llama/Llama-3.1-8B-Instruct"}, "", ""},
		{"model directory without a tokenizer", []string{"--model-path", empty}, "",
			"--model-path " + empty + ": tokenizer " + empty + ": no tokenizer: the directory has neither tokenizer.json nor tiktoken.model"},
		{"no such tokenizer path", []string{"--tokenizer-path", "nowhere/at-all"}, "",
			"--tokenizer-path nowhere/at-all: no such directory, nor a model id in the local Hugging Face cache"},
	}
	for _, tt := range tests {
		o, err := parseServeFlags(tt.args, io.Discard)
		switch {
		case tt.wantErr != "":
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%s: got error %v, want %q", tt.name, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.wantTok == "" && o.tokenizer != nil:
			t.Errorf("%s: loaded %s, want the profile's tokenizer", tt.name, o.tokenizer.Name())
		case tt.wantTok != "" && (o.tokenizer == nil || o.tokenizer.Name() != tt.wantTok):
			t.Errorf("%s: got tokenizer %v, want %s", tt.name, o.tokenizer, tt.wantTok)
		}
	}
	// A model id that is nowhere on the machine names the model only, and
	// serve says so: the server counts with the profile's tokenizer.
	var stderr strings.Builder
	if _, err := parseServeFlags([]string{"--model-path", "meta-llama/Llama-3.1-8B-Instruct"}, &stderr); err != nil ||
		!strings.Contains(stderr.String(), "serve: --model-path meta-llama/Llama-3.1-8B-Instruct is no local directory nor a model in the local Hugging Face cache: it names the model only") {
		t.Errorf("--model-path of a model that is not here: error %v, stderr %q; want a warning", err, stderr.String())
	}
	if !strings.Contains(serveHelp(t), "-tokenizer-path DIR") {
		t.Errorf("serve --help does not show --tokenizer-path DIR")
	}
}

func serveHelp(t *testing.T) string {
	var b strings.Builder
	fs, _, _ := serveFlags(&b)
	fs.PrintDefaults()
	return b.String()
}

// A profile file may name a tokenizer directory, relative to itself;
// sglmock profiles shows it, and the built-ins show their chat templates.
func TestProfilesShowTokenizer(t *testing.T) {
	dir := t.TempDir()
	y, _ := os.ReadFile(filepath.Join("..", "..", "mockserver", "profile", "builtin", "default.yaml"))
	path := filepath.Join(dir, "mine.yaml")
	os.WriteFile(path, append(y, []byte("tokenizer_path: models/tiny\n")...), 0o644)
	for _, tt := range []struct{ arg, want string }{
		{path, "tokenizer_path: " + filepath.Join(dir, "models", "tiny") + "\n"},
		{"llama-8b-eagle3-h100", "chat_template: llama-3.1"},
		{"kimi-k2.6-rtx6000", "chat_template: kimi-k2"},
	} {
		var out strings.Builder
		if code := runProfiles([]string{tt.arg}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), tt.want) {
			t.Errorf("profiles %s: exit %d, output without %q:\n%s", tt.arg, code, tt.want, out.String())
		}
	}
}

// The list gives every built-in, one a line, its description starting in
// one column past the longest name.
func TestProfilesListAligns(t *testing.T) {
	var out strings.Builder
	if code := runProfiles(nil, &out, io.Discard); code != 0 {
		t.Fatalf("profiles: exit %d", code)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")[1:]
	builtins := profile.Builtins()
	if len(lines) != len(builtins) {
		t.Fatalf("got %d lines, want one for each of %d profiles:\n%s", len(lines), len(builtins), out.String())
	}
	column := -1
	for i, b := range builtins {
		at := strings.Index(lines[i], "  "+b.Description)
		if !strings.HasPrefix(lines[i], "  "+b.Name+" ") || at < len(b.Name)+2 || column >= 0 && at != column {
			t.Errorf("line %d: got %q, want %s and its description from column %d", i, lines[i], b.Name, column)
		}
		column = at
	}
}
