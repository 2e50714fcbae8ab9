// Package ranks is the node's record of which traced processes are ranks
// and where each stands in its job: the rank book (incarnations, numbering
// by order of appearance, pruning, dump flags), the election of the rank
// among processes that share an identity (package election), the identity
// a launcher's variables give (package identity), and the scope that
// chooses which processes may be ranks at all (Scope).
//
// It is pure where the election is: it reads no /proc. The agent asks the
// book what to look at (Book.Unread, Book.Unsettled), reads it off the
// tracer's goroutine, and hands back what it read (Book.Resolved, with
// Facts; Book.Exclude when the Scope refuses it). The tracer's goroutine
// only tells the book what it saw (Book.See, Book.Forked, Book.FromComm,
// Book.Exit), which takes the book's lock for a few map operations.
//
// A process not looked at yet is a candidate: never a rank, announced,
// dumped or numbered until its environment was read. A communicator it
// creates before that look waits for the look, so that a rank named in
// the environment comes first.
package ranks
