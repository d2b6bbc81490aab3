package calibrate

import (
	"os"
	"strings"
	"testing"
)

// docs/calibration.md quotes the reports on the H200 rows: section 4 the
// whole sweep's (the six flush+nonce rows' where the text before a quote
// says so), section 5 the three short rows'. Every line of each quote is
// a line of that golden report, so the figures a user reads are those the
// command the section gives prints.
func TestCalibrationDocQuotesTheReports(t *testing.T) {
	doc, err := os.ReadFile("../docs/calibration.md")
	if err != nil {
		t.Fatal(err)
	}
	golden := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// paragraph is the last paragraph of text before the line.
	section, source, paragraph, quoted, ended := "", "", "", 0, false
	for n, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			section, source = line, ""
		case line == "```text":
			switch {
			case strings.HasPrefix(section, "## 5."):
				source = "h200-3rows-short.txt"
			case strings.HasPrefix(section, "## 4.") && strings.Contains(paragraph, "six flush+nonce rows"):
				source = "h200-flush-nonce.txt"
			case strings.HasPrefix(section, "## 4."):
				source = "h200-all.txt"
			}
		case strings.HasPrefix(line, "```"):
			source = ""
		case source != "":
			if strings.TrimSpace(line) == "" {
				continue
			}
			quoted++
			if !strings.Contains(golden(source), line+"\n") {
				t.Errorf("docs/calibration.md:%d (%s) quotes a line %s does not hold:\n%s", n+1, section, source, line)
			}
		case strings.TrimSpace(line) == "":
			ended = true
		default:
			if ended {
				paragraph, ended = "", false
			}
			paragraph += line + " "
		}
	}
	if quoted < 10 {
		t.Errorf("%d lines quoted in sections 4 and 5, want the reports' lines these sections show", quoted)
	}
}
