package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ardanlabs/jinja"
)

// Message is one chat turn as the template reads it: a dict of role,
// content and the message's other keys, in the order SGLang builds it.
type Message struct {
	Role    string // system, user, assistant, tool or developer
	Content string
	// Parts, a JSON list, is the content as a list of parts in place of
	// Content (an "openai" template's; see ChatContentFormat). The
	// content key then comes last, as SGLang rebuilds such a message.
	Parts json.RawMessage
	// Fields are the message's other keys (tool_call_id, name,
	// tool_calls, ...), in order, with JSON values.
	Fields []Field
}

// Field is a key of a template's variables or of a message, with its
// value as JSON.
type Field struct {
	Key   string
	Value json.RawMessage
}

// Chat is a conversation to render and what transformers'
// apply_chat_template renders it with.
type Chat struct {
	Messages            []Message
	AddGenerationPrompt bool
	// Tools is the tools variable: a JSON list, or nil for None.
	Tools json.RawMessage
	// Kwargs are the template's extra variables, in order (SGLang's
	// reasoning_effort and chat_template_kwargs); a later one wins.
	Kwargs []Field
}

// chatTemplate is a compiled Jinja chat template and the special tokens
// it is rendered with.
type chatTemplate struct {
	name string
	tmpl *jinja.Template
	// specials are the named special tokens transformers passes to the
	// template (its special_tokens_map).
	specials []specialToken
	// contentFormat is how SGLang hands the template a message's content
	// parts: "string" or "openai" (detectContentFormat).
	contentFormat string
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
// chat_template_kwargs (enable_thinking, ...), in key order. The text
// carries its own special tokens: tokenize it with Encode, as SGLang's
// apply_chat_template does. A template that fails is a *TemplateError.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	c := Chat{Messages: msgs, AddGenerationPrompt: addGenerationPrompt}
	keys := make([]string, 0, len(kwargs))
	for k := range kwargs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, err := json.Marshal(kwargs[k])
		if err != nil {
			return "", &TemplateError{fmt.Errorf("chat_template_kwargs[%q]: %w", k, err)}
		}
		c.Kwargs = append(c.Kwargs, Field{Key: k, Value: v})
	}
	return t.RenderChat(c)
}

// RenderChat renders a chat with the tokenizer's chat template, as
// transformers' apply_chat_template(tokenize=False) does: the template
// sees messages, tools, documents (None), add_generation_prompt, the
// special tokens and the extra variables. A template that fails is a
// *TemplateError.
func (t *Tokenizer) RenderChat(c Chat) (string, error) {
	if t.chat == nil {
		return "", &TemplateError{ErrNoChatTemplate}
	}
	return t.chat.render(c)
}

// ChatTemplate is the name of the tokenizer's chat template: a built-in
// one's, or the file it was read from; "" when it has none.
func (t *Tokenizer) ChatTemplate() string {
	if t.chat == nil {
		return ""
	}
	return t.chat.name
}

// ChatContentFormat is how SGLang hands this tokenizer's chat template a
// message whose content is a list of parts: "openai" (the list itself,
// for a template that iterates a message's content or names a modality)
// or "string" (the text parts joined with a space).
func (t *Tokenizer) ChatContentFormat() string {
	if t.chat == nil {
		return contentString
	}
	return t.chat.contentFormat
}

// The render's own variables: no template key can replace them.
var renderVars = []string{"messages", "tools", "documents", "add_generation_prompt"}

// reservedKwargs are apply_chat_template's arguments that SGLang passes
// itself: a template variable of the same name is Python's TypeError,
// which SGLang answers 400.
var reservedKwargs = []string{"tokenize", "add_generation_prompt", "tools", "return_dict"}

func (c *chatTemplate) render(chat Chat) (out string, err error) {
	defer func() {
		// A template is foreign code: whatever it does wrong is the
		// request's error, never the server's crash.
		if r := recover(); r != nil {
			out, err = "", &TemplateError{fmt.Errorf("%v", r)}
		}
	}()
	data := make(map[string]jinja.Value, len(chat.Kwargs)+len(c.specials)+8)
	for _, t := range c.specials {
		data[t.key] = jinja.NewString(t.text)
	}
	for _, f := range chat.Kwargs {
		if slices.Contains(reservedKwargs, f.Key) {
			return "", &TemplateError{fmt.Errorf("PreTrainedTokenizerBase.apply_chat_template() got multiple values for keyword argument '%s'", f.Key)}
		}
		v, err := jsonValue(f.Value)
		if err != nil {
			return "", &TemplateError{fmt.Errorf("%s: %w", f.Key, err)}
		}
		data[f.Key] = v
	}
	list := make([]jinja.Value, len(chat.Messages))
	for i, m := range chat.Messages {
		if list[i], err = messageValue(m); err != nil {
			return "", &TemplateError{fmt.Errorf("messages[%d]: %w", i, err)}
		}
	}
	data["messages"] = jinja.NewList(list)
	data["tools"] = jinja.None() // transformers passes tools=None
	if len(chat.Tools) > 0 && string(chat.Tools) != "null" {
		if data["tools"], err = jsonValue(chat.Tools); err != nil {
			return "", &TemplateError{fmt.Errorf("tools: %w", err)}
		}
	}
	data["documents"] = jinja.None()
	data["add_generation_prompt"] = jinja.NewBool(chat.AddGenerationPrompt)
	if _, ok := data["strftime_now"]; !ok {
		data["strftime_now"] = jinja.NewCallable("strftime_now", strftimeNow)
	}
	data[pyStrFunc] = jinja.NewCallable(pyStrFunc, pyPrint)
	data[pyFilters["format"]] = jinja.NewCallable("format", pyFormatFilter)
	data[pyFilters["tojson"]] = jinja.NewCallable("tojson", pyToJSON)
	data[pyFilters["string"]] = jinja.NewCallable("string", pyStringFilter)
	s, err := c.tmpl.RenderValues(data)
	if err != nil {
		return "", &TemplateError{err}
	}
	return s, nil
}

// messageValue is a message as the template's dict: role, content (a
// string, or the parts last) and its other keys.
func messageValue(m Message) (jinja.Value, error) {
	d := jinja.NewDict()
	dict := d.AsDict()
	dict.Set("role", jinja.NewString(m.Role))
	if m.Parts == nil {
		dict.Set("content", jinja.NewString(m.Content))
	}
	for _, f := range m.Fields {
		v, err := jsonValue(f.Value)
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("%s: %w", f.Key, err)
		}
		dict.Set(f.Key, v)
	}
	if m.Parts != nil {
		parts, err := jsonValue(m.Parts)
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("content: %w", err)
		}
		dict.Set("content", parts)
	}
	return d, nil
}

// jsonValue decodes JSON into a template value as Python's json.loads
// does: objects keep their keys' order, integers stay integers.
func jsonValue(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("more than one JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(k.(string), v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %v", t)
	case json.Number:
		return jinja.FromGoValue(t), nil
	default:
		return jinja.FromGoValue(t), nil
	}
}

// strftimeNow is transformers' strftime_now: datetime.now().strftime,
// at templateDate.
func strftimeNow(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || !args[0].IsString() {
		return jinja.Undefined(), errors.New("strftime_now takes one format string")
	}
	return jinja.NewString(pyStrftime(args[0].AsString(), templateDate)), nil
}

// compileTemplate compiles a chat template's source, rendered with the
// special tokens bos and eos ("": none).
func compileTemplate(name, source, bos, eos string) (*chatTemplate, error) {
	prepared, err := prepareTemplate(source)
	if err != nil {
		return nil, err
	}
	tmpl, err := jinja.Compile(prepared)
	if err != nil {
		return nil, err
	}
	c := &chatTemplate{name: name, tmpl: tmpl, contentFormat: detectContentFormat(source)}
	c.addSpecials(specialToken{"bos_token", bos}, specialToken{"eos_token", eos})
	return c, nil
}

// specialToken is a named special token and its text.
type specialToken struct{ key, text string }

// addSpecials adds named special tokens to the template's variables; one
// without text is left out, as transformers' special_tokens_map leaves out
// a token that is not set.
func (c *chatTemplate) addSpecials(specials ...specialToken) {
	for _, t := range specials {
		if t.text != "" {
			c.specials = append(c.specials, t)
		}
	}
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
	if cfg != nil {
		c.addSpecials(specialToken{"unk_token", string(cfg.UnkToken)}, specialToken{"sep_token", string(cfg.SepToken)},
			specialToken{"pad_token", string(cfg.PadToken)}, specialToken{"cls_token", string(cfg.ClsToken)},
			specialToken{"mask_token", string(cfg.MaskToken)})
	}
	return c, nil
}
