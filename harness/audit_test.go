package harness_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

// A server that kept only part of its history says so: the audit cannot
// vouch for requests whose records are gone.
func TestAuditSaysWhenRecordsWereLetGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{SimTruthBytes: 4 << 10})
		for i := range 40 {
			// Distinct first tokens: no request shares a prefix with another.
			body := fmt.Sprintf(`{"input_ids": [%d, 5, 6, 7], "sampling_params": {"max_new_tokens": 2}}`, 1000+i)
			if code, resp, _ := m.Do(t, "POST", "/generate", body); code != 200 {
				t.Fatalf("got %d %s", code, resp)
			}
		}
		rep, err := harness.Audit(context.Background(), client(m), 0)
		if err != nil {
			t.Fatal(err)
		}
		kept := len(rep.Requests)
		want := fmt.Sprintf("the server kept the records of only the last %d of 40 requests", kept)
		if kept >= 40 || rep.Verdict.Level() != harness.Suspect || !strings.HasPrefix(rep.Verdict.String(), "SUSPECT: "+want) {
			t.Fatalf("got %d records and verdict %q, want fewer than 40 and %q", kept, rep.Verdict, want)
		}
	})
}
