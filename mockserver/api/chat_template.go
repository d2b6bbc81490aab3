package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// chatTemplateRequest is what shapes a chat's prompt, as the chat route,
// its render route and /tokenize read it (SGLang's ChatCompletionRequest
// and TokenizeRequest).
type chatTemplateRequest struct {
	Messages []chatMessage `json:"messages"`
	// Tools and ToolChoice: the tools the template lists, unless the
	// choice is "none" (a named function: that one alone).
	Tools      json.RawMessage `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
	// ContinueFinalMessage continues a last assistant message instead of
	// starting a new turn.
	ContinueFinalMessage bool `json:"continue_final_message"`
	// ReasoningEffort and ChatTemplateKwargs are the template's extra
	// variables.
	ReasoningEffort    json.RawMessage `json:"reasoning_effort"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

// chatMessage is a message as a request gives it.
type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ToolCallID       json.RawMessage `json:"tool_call_id"`
	Name             json.RawMessage `json:"name"`
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	Tools            json.RawMessage `json:"tools"`
}

// chatPrompt renders a chat with the tokenizer's template as SGLang's
// _apply_jinja_template does (serving_chat.py): each message as the dict
// SGLang builds, the generation prompt, the tools unless tool_choice is
// "none", reasoning_effort and chat_template_kwargs; a template that fails
// with tools is tried again with each tool's function alone. With
// continue_final_message a last assistant message is continued: it is
// left out of the chat and its text follows the rendered prompt. The
// prompt is tokenized without the BOS a text prompt gets (the template
// writes its own). A template that cannot render the chat is the
// request's error.
func (s *Server) chatPrompt(req *chatTemplateRequest) (engine.Request, error) {
	tok := s.eng.Tokenizer()
	chat, prefix, err := templateChat(req, tok.ChatContentFormat())
	if err != nil {
		return engine.Request{}, err
	}
	text, err := tok.RenderChat(chat)
	if err != nil && chat.Tools != nil {
		// Some templates (Mistral's) take tools without the OpenAI
		// wrapper.
		chat.Tools = functionsOnly(chat.Tools)
		text, err = tok.RenderChat(chat)
	}
	if err != nil {
		return engine.Request{}, err
	}
	return engine.Request{Text: text + prefix, Templated: true}, nil
}

// templateChat turns a request into the chat SGLang renders, and the text
// of the assistant message it continues ("" for none).
func templateChat(req *chatTemplateRequest, contentFormat string) (tokenizer.Chat, string, error) {
	chat := tokenizer.Chat{AddGenerationPrompt: true}
	msgs := make([]tokenizer.Message, len(req.Messages))
	for i := range req.Messages {
		m, err := templateMessage(&req.Messages[i], contentFormat)
		if err != nil {
			return chat, "", prefixError(fmt.Sprintf("messages.%d.", i), err)
		}
		msgs[i] = m
	}
	// _handle_last_assistant_message: a last assistant message with text
	// is continued, or else becomes a user message.
	prefix := ""
	if last := len(msgs) - 1; last >= 0 && msgs[last].Role == "assistant" && msgs[last].Parts == nil {
		if req.ContinueFinalMessage {
			prefix, msgs = msgs[last].Content, msgs[:last]
		} else {
			msgs[last] = tokenizer.Message{Role: "user", Content: msgs[last].Content}
		}
	}
	chat.Messages = msgs
	tools, err := templateTools(req)
	if err != nil {
		return chat, "", err
	}
	chat.Tools = tools
	if chat.Kwargs, err = templateKwargs(req); err != nil {
		return chat, "", err
	}
	return chat, prefix, nil
}

// prefixError puts a field's path before a malformed body's message.
func prefixError(path string, err error) error {
	var m malformedError
	if errors.As(err, &m) {
		return malformed("%s%s", path, m.message)
	}
	return err
}

// templateMessage is a message as SGLang hands it to the template: its
// model_dump with null fields left out (a user message has only role and
// content), content null as "", a list of parts joined with a space for a
// "string" template or kept (normalized, last) for an "openai" one, a tool
// result's text parts joined, an assistant's tool call arguments parsed.
func templateMessage(m *chatMessage, contentFormat string) (tokenizer.Message, error) {
	out := tokenizer.Message{Role: m.Role}
	var err error
	if out.Content, out.Parts, err = templateContent(m.Content, m.Role, contentFormat); err != nil {
		return out, err
	}
	if m.Role == "user" {
		return out, nil
	}
	for _, f := range []struct {
		key string
		raw json.RawMessage
	}{{"tool_call_id", m.ToolCallID}, {"name", m.Name}, {"reasoning_content", m.ReasoningContent}} {
		if isNull(f.raw) {
			continue
		}
		if f.raw[0] != '"' {
			return out, malformed("%s: Input should be a valid string", f.key)
		}
		out.Fields = append(out.Fields, tokenizer.Field{Key: f.key, Value: f.raw})
	}
	if !isNull(m.ToolCalls) {
		calls, err := toolCalls(m.ToolCalls, m.Role == "assistant")
		if err != nil {
			return out, err
		}
		out.Fields = append(out.Fields, tokenizer.Field{Key: "tool_calls", Value: calls})
	}
	if !isNull(m.Tools) {
		tools, err := dumpTools(m.Tools)
		if err != nil {
			return out, prefixError("tools.", err)
		}
		out.Fields = append(out.Fields, tokenizer.Field{Key: "tools", Value: tools})
	}
	return out, nil
}

// contentPart is a part of a message's content, as far as SGLang reads it.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
	Name string `json:"name"`
}

// templateContent is a message's content as the template gets it: text,
// or (for an "openai" template) the parts as JSON
// (process_content_for_template_format, normalize_tool_content).
func templateContent(raw json.RawMessage, role, contentFormat string) (string, json.RawMessage, error) {
	if isNull(raw) {
		return "", nil, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, nil, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, malformed("content must be a string or a list of content parts")
	}
	isText := func(p contentPart) bool { return p.Type == "text" || p.Type == "input_text" }
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if isText(p) {
			texts = append(texts, p.Text)
		}
	}
	if contentFormat != "openai" {
		return strings.Join(texts, " "), nil, nil
	}
	var b bytes.Buffer
	b.WriteByte('[')
	allText := true
	for _, p := range parts {
		var part any
		switch p.Type {
		case "image_url", "input_image":
			part = map[string]string{"type": "image"}
		case "video_url":
			part = map[string]string{"type": "video"}
		case "audio_url":
			part = map[string]string{"type": "audio"}
		case "text", "input_text":
			part = struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}{"text", p.Text}
		case "tool_reference":
			part = struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}{"tool_reference", p.Name}
		default:
			continue
		}
		allText = allText && isText(p)
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		enc, _ := json.Marshal(part)
		b.Write(enc)
	}
	b.WriteByte(']')
	if role == "tool" && allText {
		// normalize_tool_content: a tool result of text parts is text.
		return strings.Join(texts, " "), nil, nil
	}
	return "", b.Bytes(), nil
}

// toolCalls is a message's tool_calls as SGLang dumps them: each call's
// id, index, type and function (name, arguments), nulls kept; an
// assistant's arguments, given as a JSON string, parsed into the object
// templates expect (normalize_assistant_tool_call_arguments).
func toolCalls(raw json.RawMessage, parse bool) (json.RawMessage, error) {
	var calls []struct {
		ID       json.RawMessage `json:"id"`
		Index    json.RawMessage `json:"index"`
		Type     *string         `json:"type"`
		Function *struct {
			Name      json.RawMessage `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, malformed("tool_calls: Input should be a valid list of tool calls")
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, c := range calls {
		if c.Function == nil {
			return nil, malformed("tool_calls.%d.function: Field required", i)
		}
		if c.Type != nil && *c.Type != "function" {
			return nil, malformed("tool_calls.%d.type: Input should be 'function'", i)
		}
		for _, f := range []struct {
			name string
			raw  json.RawMessage
			kind byte
		}{{"id", c.ID, '"'}, {"index", c.Index, '0'}, {"function.name", c.Function.Name, '"'}} {
			if !isNull(f.raw) && (f.kind == '"') != (f.raw[0] == '"') {
				return nil, malformed("tool_calls.%d.%s: Input should be a valid %s", i, f.name, map[byte]string{'"': "string", '0': "integer"}[f.kind])
			}
		}
		args := c.Function.Arguments
		if !isNull(args) && args[0] == '"' && parse {
			var s string
			json.Unmarshal(args, &s)
			if !json.Valid([]byte(s)) {
				return nil, errors.New("Assistant tool call function.arguments must be valid JSON.")
			}
			if trimmed := bytes.TrimSpace([]byte(s)); len(trimmed) == 0 || trimmed[0] != '{' {
				return nil, errors.New("Assistant tool call function.arguments must be a JSON object.")
			}
			args = json.RawMessage(s)
		} else if !isNull(args) && args[0] != '"' && args[0] != '{' {
			return nil, malformed("tool_calls.%d.function.arguments: Input should be a valid string or dictionary", i)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%s,"index":%s,"type":"function","function":{"name":%s,"arguments":%s}}`,
			orNull(c.ID), orNull(c.Index), orNull(c.Function.Name), orNull(args))
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// orNull is raw, or null when absent.
func orNull(raw json.RawMessage) json.RawMessage {
	if isNull(raw) {
		return json.RawMessage("null")
	}
	return raw
}

// tool is a tool as a request gives it.
type tool struct {
	Type     *string `json:"type"`
	Function *struct {
		Description  json.RawMessage `json:"description"`
		Name         *string         `json:"name"`
		Parameters   json.RawMessage `json:"parameters"`
		Strict       json.RawMessage `json:"strict"`
		DeferLoading json.RawMessage `json:"defer_loading"`
	} `json:"function"`
	DeferLoading json.RawMessage `json:"defer_loading"`
}

// dumpTools is a tool list as SGLang's Tool.model_dump gives each: type,
// function (description, name, parameters, strict, and defer_loading when
// set, the tool's own when the function has none) and defer_loading, nulls
// kept.
func dumpTools(raw json.RawMessage) (json.RawMessage, error) {
	tools, err := parseTools(raw)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, t := range tools {
		if i > 0 {
			b.WriteByte(',')
		}
		typ := "function"
		if t.Type != nil {
			typ = *t.Type
		}
		f := t.Function
		name, _ := json.Marshal(*f.Name)
		strict := f.Strict
		if isNull(strict) {
			strict = json.RawMessage("false")
		}
		typJSON, _ := json.Marshal(typ)
		fmt.Fprintf(&b, `{"type":%s,"function":{"description":%s,"name":%s,"parameters":%s,"strict":%s`,
			typJSON, orNull(f.Description), name, orNull(f.Parameters), strict)
		defer_ := f.DeferLoading
		if isNull(defer_) {
			defer_ = t.DeferLoading
		}
		if !isNull(defer_) {
			fmt.Fprintf(&b, `,"defer_loading":%s`, defer_)
		}
		fmt.Fprintf(&b, `},"defer_loading":%s}`, orNull(t.DeferLoading))
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// parseTools reads a tool list, checking what SGLang's Tool model checks.
func parseTools(raw json.RawMessage) ([]tool, error) {
	var tools []tool
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, malformed("tools: Input should be a valid list of tools")
	}
	for i, t := range tools {
		switch {
		case t.Function == nil:
			return nil, malformed("tools.%d.function: Field required", i)
		case t.Function.Name == nil:
			return nil, malformed("tools.%d.function.name: Field required", i)
		}
		for _, f := range []struct {
			name string
			raw  json.RawMessage
			ok   func(byte) bool
			kind string
		}{
			{"description", t.Function.Description, func(c byte) bool { return c == '"' }, "string"},
			{"strict", t.Function.Strict, func(c byte) bool { return c == 't' || c == 'f' }, "boolean"},
			{"defer_loading", t.Function.DeferLoading, func(c byte) bool { return c == 't' || c == 'f' }, "boolean"},
		} {
			if !isNull(f.raw) && !f.ok(f.raw[0]) {
				return nil, malformed("tools.%d.function.%s: Input should be a valid %s", i, f.name, f.kind)
			}
		}
		if !isNull(t.DeferLoading) && t.DeferLoading[0] != 't' && t.DeferLoading[0] != 'f' {
			return nil, malformed("tools.%d.defer_loading: Input should be a valid boolean", i)
		}
	}
	return tools, nil
}

// templateTools is the tools variable: the request's tools unless
// tool_choice is "none" (its default without tools), only the named one
// for a named choice; nil for None.
func templateTools(req *chatTemplateRequest) (json.RawMessage, error) {
	if isNull(req.Tools) {
		if !isNull(req.ToolChoice) {
			if _, err := toolChoice(req.ToolChoice); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	tools, err := parseTools(req.Tools)
	if err != nil {
		return nil, err
	}
	choice := "auto"
	if !isNull(req.ToolChoice) {
		if choice, err = toolChoice(req.ToolChoice); err != nil {
			return nil, err
		}
	}
	if choice == "none" || len(tools) == 0 {
		return nil, nil
	}
	dumped, err := dumpTools(req.Tools)
	if err != nil {
		return nil, err
	}
	if choice == "auto" || choice == "required" {
		return dumped, nil
	}
	// A named function: that tool alone.
	var all []json.RawMessage
	json.Unmarshal(dumped, &all)
	var b bytes.Buffer
	b.WriteByte('[')
	for i, t := range tools {
		if *t.Function.Name != choice {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.Write(all[i])
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// toolChoice reads tool_choice: "none", "auto", "required", or the name
// of the function a {"type": "function", "function": {"name": ...}}
// object names.
func toolChoice(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case "none", "auto", "required":
			return s, nil
		}
		return "", malformed("tool_choice: Input should be 'auto', 'required' or 'none'")
	}
	var named struct {
		Function *struct {
			Name *string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Function == nil {
		return "", malformed("tool_choice: Input should be 'auto', 'required', 'none' or a function")
	}
	if named.Function.Name == nil {
		// ToolChoiceFuncName.name is optional: a choice without one
		// names no tool.
		return "\x00", nil
	}
	return *named.Function.Name, nil
}

// functionsOnly is a tool list with each tool's function in its place.
func functionsOnly(tools json.RawMessage) json.RawMessage {
	var list []map[string]json.RawMessage
	var order []json.RawMessage
	if json.Unmarshal(tools, &list) != nil || json.Unmarshal(tools, &order) != nil {
		return tools
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, t := range list {
		if i > 0 {
			b.WriteByte(',')
		}
		if f, ok := t["function"]; ok {
			b.Write(f)
		} else {
			b.Write(order[i])
		}
	}
	b.WriteByte(']')
	return b.Bytes()
}

// templateKwargs are the template's extra variables: reasoning_effort
// when given, then chat_template_kwargs in order; reasoning_effort "none"
// turns thinking off unless the kwargs say otherwise (SGLang's
// normalize_reasoning_inputs).
func templateKwargs(req *chatTemplateRequest) ([]tokenizer.Field, error) {
	var out []tokenizer.Field
	effortNone := false
	if !isNull(req.ReasoningEffort) {
		var s string
		var f float64
		switch {
		case json.Unmarshal(req.ReasoningEffort, &s) == nil:
			switch s {
			case "none", "minimal", "low", "medium", "high", "xhigh", "max":
			default:
				return nil, malformed("reasoning_effort: Input should be 'none', 'minimal', 'low', 'medium', 'high', 'xhigh' or 'max'")
			}
			effortNone = s == "none"
		case json.Unmarshal(req.ReasoningEffort, &f) == nil && req.ReasoningEffort[0] != 't' && req.ReasoningEffort[0] != 'f':
			if f < 0 || f > 0.99 {
				return nil, malformed("reasoning_effort: Input should be less than or equal to 0.99 and greater than or equal to 0")
			}
		default:
			return nil, malformed("reasoning_effort: Input should be a string or a number")
		}
		out = append(out, tokenizer.Field{Key: "reasoning_effort", Value: req.ReasoningEffort})
	}
	if !isNull(req.ChatTemplateKwargs) {
		fields, err := objectFields(req.ChatTemplateKwargs)
		if err != nil {
			return nil, malformed("chat_template_kwargs: Input should be a valid dictionary")
		}
		out = append(out, fields...)
	}
	if effortNone {
		for _, k := range []string{"thinking", "enable_thinking"} {
			if !slices.ContainsFunc(out[1:], func(f tokenizer.Field) bool { return f.Key == k }) {
				out = append(out, tokenizer.Field{Key: k, Value: json.RawMessage("false")})
			}
		}
	}
	return out, nil
}

// objectFields are a JSON object's keys and values, in order; a repeated
// key keeps its first place and its last value, as Python's json.loads.
func objectFields(raw json.RawMessage) ([]tokenizer.Field, error) {
	var keys []string
	var values map[string]json.RawMessage
	if err := json.Unmarshal(raw, &values); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(values))
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := k.(string)
		if !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	out := make([]tokenizer.Field, len(keys))
	for i, k := range keys {
		out[i] = tokenizer.Field{Key: k, Value: values[k]}
	}
	return out, nil
}
