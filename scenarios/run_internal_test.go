package scenarios

import "testing"

// A real-time failure is put down to the host when the client's own
// measurement error is beyond lateClient; undefined errors are ignored.
func TestMeasurementError(t *testing.T) {
	rw := func(ttft float64, decode *float64) *row {
		r := &row{figures: map[string]*float64{}}
		r.set("ttft_err", ttft)
		r.setPtr("decode_err", decode)
		return r
	}
	late := -0.08
	tests := []struct {
		rows []*row
		want float64
	}{
		{nil, 0},
		{[]*row{rw(0.01, nil)}, 0.01},
		{[]*row{rw(0.01, nil), rw(0.002, &late)}, 0.08},
		{[]*row{{figures: map[string]*float64{}}}, 0},
	}
	for i, tt := range tests {
		if got := measurementError(tt.rows); got != tt.want {
			t.Errorf("%d: got %g, want %g", i, got, tt.want)
		}
	}
	if measurementError([]*row{rw(0.01, nil)}) > lateClient || measurementError([]*row{rw(0.002, &late)}) <= lateClient {
		t.Errorf("lateClient %g does not separate a 1 %% error from an 8 %% one", lateClient)
	}
}

// Descriptions and notes are reflowed to the width, paragraphs kept apart,
// and a word longer than the width gets a line of its own.
func TestWrap(t *testing.T) {
	tests := []struct {
		text, prefix string
		width        int
		want         string
	}{
		{"a b c d", "", 3, "a b\nc d"},
		{"a\nb   c\n\nd", "  ", 7, "  a b c\n\n  d"},
		{"abcdefgh ij", "", 4, "abcdefgh\nij"},
		{"  \n", "", 10, ""},
	}
	for _, tt := range tests {
		if got := wrap(tt.text, tt.prefix, tt.width); got != tt.want {
			t.Errorf("wrap(%q, %q, %d): got %q, want %q", tt.text, tt.prefix, tt.width, got, tt.want)
		}
	}
}
