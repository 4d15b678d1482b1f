package nb

// Must returns v, or panics with err when it is not nil: for notebook cells, where a panic
// stops the cell and shows the message. Library code returns errors instead.
//
//	run := nb.Must(agrl.OpenRun("runs/calc"))
//	eps := nb.Must(nb.Latest(run))
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
