package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
	json "github.com/goccy/go-json"
)

// Message is one chat turn.
type Message struct {
	Role    string // system, user, assistant, tool or developer
	Content string
}

// chatTemplate is a compiled Jinja chat template and the special tokens
// it is rendered with.
type chatTemplate struct {
	name     string
	tmpl     *jinja.Template
	bos, eos string
}

// TemplateError is a chat template that could not render a conversation:
// the request's error, as SGLang answers 400 with the template's message.
type TemplateError struct{ Err error }

func (e *TemplateError) Error() string { return "chat template: " + e.Err.Error() }

func (e *TemplateError) Unwrap() error { return e.Err }

// ErrNoChatTemplate is the error of a chat on a tokenizer without one.
var ErrNoChatTemplate = errors.New("the tokenizer has no chat template (tokenizer_config.json has no chat_template and there is no chat_template.jinja)")

// templateDate is the date strftime_now gives a template: templates that
// print today's date (Llama 3.2's) render the same prompt every day, so
// a prompt's tokens never change with the calendar.
var templateDate = time.Date(2024, time.July, 26, 0, 0, 0, 0, time.UTC)

// ApplyChatTemplate renders msgs with the tokenizer's chat template. With
// addGenerationPrompt the text ends with the opening of an assistant turn,
// where the model's answer goes. kwargs are the request's
// chat_template_kwargs (enable_thinking, ...). The text carries its own
// special tokens: tokenize it with Encode, as SGLang's
// apply_chat_template does. A template that fails is a *TemplateError.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	if t.chat == nil {
		return "", &TemplateError{ErrNoChatTemplate}
	}
	return t.chat.render(msgs, addGenerationPrompt, kwargs)
}

// ChatTemplate is the name of the tokenizer's chat template: a built-in
// one's, or the file it was read from; "" when it has none.
func (t *Tokenizer) ChatTemplate() string {
	if t.chat == nil {
		return ""
	}
	return t.chat.name
}

func (c *chatTemplate) render(msgs []Message, addGenerationPrompt bool, kwargs map[string]any) (out string, err error) {
	defer func() {
		// A template is foreign code: whatever it does wrong is the
		// request's error, never the server's crash.
		if r := recover(); r != nil {
			out, err = "", &TemplateError{fmt.Errorf("%v", r)}
		}
	}()
	data := make(map[string]jinja.Value, len(kwargs)+8)
	for k, v := range kwargs {
		data[k] = jinja.FromGoValue(v)
	}
	// Messages keep the client's key order, role then content, as the
	// dicts transformers renders (tojson shows it).
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.FromGoValue(m.Role))
		d.AsDict().Set("content", jinja.FromGoValue(m.Content))
		list[i] = d
	}
	data["messages"] = jinja.NewList(list)
	data["add_generation_prompt"] = jinja.FromGoValue(addGenerationPrompt)
	data["bos_token"] = jinja.FromGoValue(c.bos)
	data["eos_token"] = jinja.FromGoValue(c.eos)
	if _, ok := data["tools"]; !ok {
		data["tools"] = jinja.FromGoValue(nil) // transformers passes tools=None
	}
	data["strftime_now"] = jinja.NewCallable("strftime_now", strftimeNow)
	s, err := c.tmpl.RenderValues(data)
	if err != nil {
		return "", &TemplateError{err}
	}
	return s, nil
}

// strftimeNow formats templateDate with Python's strftime directives.
func strftimeNow(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), errors.New("strftime_now takes one format")
	}
	format := args[0].String()
	r := strings.NewReplacer("%d", templateDate.Format("02"), "%b", templateDate.Format("Jan"),
		"%B", templateDate.Format("January"), "%Y", templateDate.Format("2006"), "%m", templateDate.Format("01"),
		"%y", templateDate.Format("06"), "%-d", templateDate.Format("2"), "%A", templateDate.Format("Monday"),
		"%a", templateDate.Format("Mon"), "%H", "00", "%M", "00", "%S", "00", "%%", "%")
	return jinja.FromGoValue(r.Replace(format)), nil
}

// compileTemplate compiles a chat template's source.
func compileTemplate(name, source, bos, eos string) (*chatTemplate, error) {
	tmpl, err := jinja.Compile(source)
	if err != nil {
		return nil, err
	}
	return &chatTemplate{name: name, tmpl: tmpl, bos: bos, eos: eos}, nil
}

// loadChatTemplate reads a model's chat template: chat_template.jinja
// beside tokenizer_config.json, else its chat_template (a string, or a
// list of named templates of which "default" is taken). None is no error:
// chats are then refused.
func loadChatTemplate(dir string, cfg *hfConfig) (*chatTemplate, error) {
	var bos, eos string
	var raw json.RawMessage
	if cfg != nil {
		bos, eos, raw = string(cfg.BOSToken), string(cfg.EOSToken), cfg.ChatTemplate
	}
	path := filepath.Join(dir, ChatTemplateFile)
	name, source := path, ""
	if b, err := os.ReadFile(path); err == nil {
		source = string(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	} else if len(raw) > 0 && string(raw) != "null" {
		name = filepath.Join(dir, TokenizerConfig)
		if err := json.Unmarshal(raw, &source); err != nil {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(raw, &named); err != nil {
				return nil, fmt.Errorf("tokenizer %s: %s: chat_template is neither a string nor a list of named templates", dir, TokenizerConfig)
			}
			i := slices.IndexFunc(named, func(n struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}) bool {
				return n.Name == "default"
			})
			if i < 0 {
				return nil, fmt.Errorf("tokenizer %s: %s: chat_template has no template named \"default\"", dir, TokenizerConfig)
			}
			source = named[i].Template
		}
	}
	if source == "" {
		return nil, nil
	}
	c, err := compileTemplate(name, source, bos, eos)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: chat template %s: %w", name, err)
	}
	return c, nil
}
