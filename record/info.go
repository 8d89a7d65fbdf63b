package record

import "strconv"

// Info is INFO's Recording section: the file, the sample, whether keys are
// in the clear, and how many decisions were recorded, dropped and lost,
// as name-value pairs in INFO's order. A nil Writer (no --record) records
// nothing.
func (w *Writer) Info() [][2]string {
	if w == nil {
		return [][2]string{{"recording", "0"}}
	}
	st := w.Stats()
	keys := "hashed"
	if w.cfg.ClearKeys {
		keys = "clear"
	}
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	return [][2]string{{"recording", "1"}, {"recording_file", st.Path}, {"recording_sample", strconv.Itoa(st.Sample)},
		{"recording_max_rate", strconv.Itoa(st.MaxRate)},
		{"recording_keys", keys}, {"recorded_decisions", u(st.Recorded)}, {"recording_dropped", u(st.Dropped)},
		{"recording_failed", u(st.Failed)}, {"recording_bytes", u(st.Bytes)}, {"recording_rotations", u(st.Rotations)},
		{"recording_last_error", st.LastError}}
}
