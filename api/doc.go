// Package api is the contract of weir's HTTP API, shared by the server and
// every client: the runs API's JSON bodies, the headers of weir's extension
// of the Durable Streams protocol, and the one table of errors, which gives
// each sentinel its HTTP status, its stable wire code (the Weir-Error
// header), its metric reason and whether a retry may work.
//
// It imports only the leaf packages store and stream (for their sentinels),
// so a program that only talks to a weir server links neither the engine
// nor a store backend.
package api
