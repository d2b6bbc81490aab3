//go:build !race

// The official openai-go client is a large module whose compile under the
// race detector costs a test run about as much as the rest of this
// package's: the file is left out of -race builds, and .ci/run's second
// pass, without -race, runs it (docs/testing.md).

package api_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// The official Go client against the mock, over the in-memory listener.
func newOpenAIClient(ts *mocktest.Mock) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(ts.URL+"/v1/"),
		option.WithHTTPClient(ts.Client),
		option.WithAPIKey("None"),
		option.WithMaxRetries(0),
	)
}

func TestOpenAIGoClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := mocktest.Start(t, api.Config{EnableCacheReport: true})
		client := newOpenAIClient(ts)
		ctx := context.Background()
		model := ts.Args().ServedModelName

		models, err := client.Models.List(ctx)
		if err != nil || len(models.Data) != 1 || models.Data[0].ID != model || models.Data[0].OwnedBy != "sglang" {
			t.Fatalf("models: %v %+v", err, models)
		}

		prompt := "The radix cache keeps every prefix of every prompt, so the second request is cheap."
		params := openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(model),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			MaxTokens: openai.Int(8),
		}
		comp, err := client.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(comp.Choices) != 1 || comp.Choices[0].FinishReason != "length" || comp.Usage.CompletionTokens != 8 ||
			comp.Object != "text_completion" || comp.Usage.PromptTokensDetails.CachedTokens != 0 {
			t.Fatalf("completion: %+v", comp)
		}
		// The same prompt again: cache report shows the hit.
		again, err := client.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := again.Usage.PromptTokensDetails.CachedTokens, comp.Usage.PromptTokens-1; got != want {
			t.Fatalf("cached tokens in usage: got %d, want %d", got, want)
		}

		stream := client.Completions.NewStreaming(ctx, params)
		var text strings.Builder
		var finish string
		for stream.Next() {
			c := stream.Current()
			if len(c.Choices) > 0 {
				text.WriteString(c.Choices[0].Text)
				if c.Choices[0].FinishReason != "" {
					finish = string(c.Choices[0].FinishReason)
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != comp.Choices[0].Text || finish != "length" {
			t.Fatalf("streamed completion %q (%s), want %q (length)", text.String(), finish, comp.Choices[0].Text)
		}

		chatParams := openai.ChatCompletionNewParams{
			Model:               openai.ChatModel(model),
			Messages:            []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("What is a radix tree?")},
			MaxCompletionTokens: openai.Int(12),
		}
		chat, err := client.Chat.Completions.New(ctx, chatParams)
		if err != nil {
			t.Fatal(err)
		}
		if len(chat.Choices) != 1 || chat.Choices[0].Message.Role != "assistant" || chat.Choices[0].Message.Content == "" ||
			chat.Usage.CompletionTokens != 12 || chat.Object != "chat.completion" {
			t.Fatalf("chat: %+v", chat)
		}

		chatParams.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		cs := client.Chat.Completions.NewStreaming(ctx, chatParams)
		var content strings.Builder
		var usageChunks, roleChunks int
		var lastUsage openai.CompletionUsage
		finish = ""
		for cs.Next() {
			c := cs.Current()
			if len(c.Choices) == 0 {
				usageChunks++
				lastUsage = c.Usage
				continue
			}
			if c.Choices[0].Delta.Role == "assistant" {
				roleChunks++
			}
			// SDK code reads delta.reasoning_content: it is there, null.
			if rc, ok := c.Choices[0].Delta.JSON.ExtraFields["reasoning_content"]; !ok || rc.Raw() != "null" {
				t.Fatalf("chunk delta without reasoning_content: null: %s", c.RawJSON())
			}
			content.WriteString(c.Choices[0].Delta.Content)
			if c.Choices[0].FinishReason != "" {
				finish = c.Choices[0].FinishReason
			}
		}
		if err := cs.Err(); err != nil {
			t.Fatal(err)
		}
		if content.String() != chat.Choices[0].Message.Content || finish != "length" || roleChunks != 1 {
			t.Fatalf("streamed chat %q (%s, %d role chunks), want %q", content.String(), finish, roleChunks, chat.Choices[0].Message.Content)
		}
		if usageChunks != 1 || lastUsage.CompletionTokens != 12 || lastUsage.PromptTokens != chat.Usage.PromptTokens {
			t.Fatalf("include_usage: %d usage chunks, last %+v", usageChunks, lastUsage)
		}
		// The second identical chat prompt was served from cache.
		if lastUsage.PromptTokensDetails.CachedTokens != chat.Usage.PromptTokens-1 {
			t.Fatalf("chat stream cached tokens: got %d, want %d", lastUsage.PromptTokensDetails.CachedTokens, chat.Usage.PromptTokens-1)
		}
		mocktest.CheckIdle(t, ts.Engine())
	})
}
