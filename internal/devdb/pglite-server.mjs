// pglite-server.mjs: the node side of package devdb.
//
// It serves one PGlite database (Postgres compiled to WASM, with pgvector)
// over the Postgres wire protocol on 127.0.0.1 using
// @electric-sql/pglite-socket. Go embeds this file and runs it as
//
//	node --input-type=module --eval <this file>
//
// with the working directory set to the directory that holds node_modules,
// so bare imports resolve there wherever the Go binary lives.
//
// Configuration comes from the environment (set by devdb.Start):
//
//	AGENTQ_PGLITE_DATA_DIR     absolute data directory; empty: in-memory
//	AGENTQ_PGLITE_PORT         TCP port on 127.0.0.1; 0 picks a free one
//	AGENTQ_PGLITE_MAX_CONNS    connections accepted at once
//	AGENTQ_PGLITE_TEMPLATE     optional file caching a freshly initialised
//	                           cluster (a dumpDataDir tarball); an in-memory
//	                           database loads it instead of running initdb,
//	                           which is several times faster, and writes it
//	                           when missing
//
// Protocol with the parent:
//   - stdout carries exactly one line, "READY port=NNNN", once the server
//     accepts connections; everything else goes to stderr.
//   - when stdin reaches EOF (the parent exited or closed it) or on
//     SIGTERM/SIGINT the server stops accepting, closes the database cleanly
//     (a checkpoint for a persistent data dir) and exits 0.
//   - a startup failure prints "ERROR <message>" on stdout and exits 1.

import fs from 'node:fs'
import { PGlite } from '@electric-sql/pglite'
import { vector } from '@electric-sql/pglite-pgvector'
import {
  PGLiteSocketHandler,
  PGLiteSocketServer,
} from '@electric-sql/pglite-socket'

const dataDir = process.env.AGENTQ_PGLITE_DATA_DIR || ''
const port = Number.parseInt(process.env.AGENTQ_PGLITE_PORT || '0', 10)
const template = dataDir === '' ? process.env.AGENTQ_PGLITE_TEMPLATE || '' : ''
const maxConnections = Number.parseInt(
  process.env.AGENTQ_PGLITE_MAX_CONNS || '100',
  10,
)

let db = null
let server = null
let stopping = null

// A client ends a session with Terminate, and asks for a running query to
// be cancelled with a CancelRequest on a connection of its own; Postgres
// closes the connection after either, and clients wait for that close. pgx
// does when it abandons a busy connection (a cancelled context, a pool
// closing under a running query): a CancelRequest, then Terminate, reading
// each until the server closes, for up to 15 s in all. pglite-socket 0.2.17
// drops the CancelRequest and passes Terminate to the shared backend,
// keeping both connections open, so every such close took 15 s here. So
// both end their connection, as Postgres does; the socket's close then runs
// the usual cleanup (the server forgets the handler, detach). PGlite cannot
// interrupt a query: a cancelled one runs to its end, and a Terminate is
// served after it, as a Postgres backend reads it after its query.
const MSG_TERMINATE = 0x58 // 'X'
const handlers = new Map() // handler id -> handler, while attached
const attach = PGLiteSocketHandler.prototype.attach
PGLiteSocketHandler.prototype.attach = async function (socket) {
  const h = await attach.call(this, socket)
  handlers.set(this.id, this)
  return h
}
const handleCancelRequest = PGLiteSocketHandler.prototype.handleCancelRequest
PGLiteSocketHandler.prototype.handleCancelRequest = function () {
  if (!handleCancelRequest.call(this)) return false
  this.syncedOnDetach = true // it never spoke to the backend
  this.socket?.end()
  return true
}

// All connections share one Postgres backend. A client that dies in the
// middle of an extended-protocol batch (say after a Parse that failed, before
// its Sync) leaves that backend ignoring every message until a Sync, and
// pglite-socket then wedges: even new connections hang at startup. So when a
// connection goes away, push a Sync through the shared query queue on its
// behalf before the library's own cleanup (which rolls back the transaction
// the connection left open, see patchQueue). A Sync on a clean backend is
// harmless: it only produces a ReadyForQuery, which nobody reads. A socket
// that errors and then closes detaches twice: the second call waits for the
// first, or it would drop the first's Sync from the queue half done.
const SYNC = new Uint8Array([0x53, 0, 0, 0, 4])
const detach = PGLiteSocketHandler.prototype.detach
PGLiteSocketHandler.prototype.detach = function (close) {
  if (!this.detaching) {
    this.detaching = (async () => {
      handlers.delete(this.id)
      // A cancel request's connection never spoke to the backend, and a
      // terminated session was synced and rolled back in its turn.
      if (this.socket && this.queryQueue && !this.syncedOnDetach) {
        try {
          await this.queryQueue.enqueue(this.id, SYNC, () => {})
        } catch {
          // The queue rejects entries of a disconnected handler; nothing to do.
        }
      }
      return detach.call(this, close)
    })()
  }
  return this.detaching
}

// ROLLBACK ends the transaction a departed connection left open. It is a
// Sync and a simple query in one queue entry: the Sync first, for a backend
// ignoring messages after an error in an extended-protocol batch.
function rollbackMessage() {
  const sql = Buffer.from('ROLLBACK\0')
  const q = Buffer.alloc(5 + sql.length)
  q[0] = 0x51 // 'Q'
  q.writeInt32BE(4 + sql.length, 1)
  sql.copy(q, 5)
  return new Uint8Array(Buffer.concat([Buffer.from(SYNC), q]))
}
const ROLLBACK = rollbackMessage()

// patchQueue replaces pglite-socket 0.2.17's query queue loop, which has
// three faults that wedge or corrupt a database shared by several
// connections:
//   - outside an explicit transaction it serves messages from any connection
//     in arrival order, so one connection's Parse/Bind/Execute sequence can be
//     interleaved with another's (both use the unnamed statement: a Bind then
//     runs the other connection's statement with this one's parameters);
//   - when a message throws it returns with `processing` still set, and the
//     queue never runs again;
//   - it takes the connection it served last for the owner of the open
//     transaction, and learns which that is only once a message's whole
//     promise chain has run. A connection that leaves just after being
//     served (a pool closing it, a process killed) while another's BEGIN is
//     executing was then taken for the owner: the library rolled back the
//     other's transaction, whose later statements ran outside any
//     transaction, each committed on its own, and messages of every
//     connection were served inside the next one's.
// Here one connection's extended-protocol sequence is served whole, up to
// its Sync; the transaction's owner is recorded the moment a message has
// run (a message runs synchronously inside execProtocolRawStream), and an
// explicit transaction keeps its owner exclusive. A departed connection's
// transaction is rolled back through the queue, in its turn, only if it
// owns it. A failed message is rejected and the loop goes on.
const MSG_SYNC = 0x53 // 'S'
const MSG_QUERY = 0x51 // 'Q'
const EXTENDED = new Set([0x50, 0x42, 0x44, 0x45, 0x43, 0x48]) // P B D E C H

function patchQueue(q) {
  q.sequenceOwner = null
  q.txOwner = null // the handler whose explicit transaction is open
  q.processQueue = async function () {
    if (this.processing || this.queue.length === 0) return
    this.processing = true
    try {
      while (this.queue.length > 0) {
        let owner = this.sequenceOwner
        if (owner === null && this.txOwner !== null && this.db.isInTransaction()) {
          owner = this.txOwner
        }
        const idx =
          owner === null
            ? 0
            : this.queue.findIndex((r) => r.handlerId === owner)
        if (idx === -1) break // the owner has not sent its next message yet
        const item = this.queue.splice(idx, 1)[0]
        const type = item.message[0]
        let bytes = 0
        try {
          await this.db.runExclusive(() => {
            const done = this.db.execProtocolRawStream(item.message, {
              onRawData: (d) => {
                bytes += d.length
                item.onData(d)
              },
            })
            // The message has run; what follows (a file system sync) is
            // asynchronous, and other handlers' cleanup may run meanwhile.
            this.txOwner = this.db.isInTransaction() ? item.handlerId : null
            return done
          })
        } catch (err) {
          this.sequenceOwner = null
          item.reject(err)
          continue
        }
        this.lastHandlerId = item.handlerId
        if (type === MSG_SYNC || type === MSG_QUERY) {
          this.sequenceOwner = null
        } else if (EXTENDED.has(type)) {
          this.sequenceOwner = item.handlerId
        }
        item.resolve(bytes)
      }
    } finally {
      this.processing = false
    }
  }
  // The library's version rolls back whatever transaction is open if the
  // departing handler was the last one served: see above.
  q.clearTransactionIfNeeded = async function (id) {
    if (this.txOwner !== id || !this.db.isInTransaction()) return
    try {
      await this.enqueue(id, ROLLBACK, () => {})
    } catch {
      // Rejected: the server is stopping.
    }
  }
  // Terminate never reaches the shared backend. Served in its turn (a Sync
  // queued for the connection comes after its earlier messages), it rolls
  // back the connection's transaction, then closes the connection.
  const enqueue = q.enqueue.bind(q)
  q.enqueue = function (id, message, onData) {
    const h = handlers.get(id)
    if (message[0] !== MSG_TERMINATE || message.length !== 5 || !h) {
      return enqueue(id, message, onData)
    }
    h.syncedOnDetach = true
    return enqueue(id, SYNC, () => {})
      .then(() => this.clearTransactionIfNeeded(id))
      .catch((err) => log(`ending a terminated session: ${err?.stack || err}`))
      .then(() => {
        h.socket?.end()
        return 0
      })
  }
  // A connection that goes away mid-sequence must not keep the others out.
  const clear = q.clearQueueForHandler.bind(q)
  q.clearQueueForHandler = function (id) {
    const owned = this.sequenceOwner === id
    if (owned) this.sequenceOwner = null
    clear(id)
    if (owned) this.processQueue() // the others were waiting on it
  }
}

function log(msg) {
  process.stderr.write(`pglite-server: ${msg}\n`)
}

// shutdown is idempotent: the first reason wins and later calls wait on it.
function shutdown(reason) {
  if (stopping) return stopping
  log(`shutting down (${reason})`)
  stopping = (async () => {
    // Hard deadline so a wedged query cannot keep the process alive.
    const timer = setTimeout(() => {
      log('shutdown timed out, exiting')
      process.exit(2)
    }, 10000)
    timer.unref()
    try {
      if (server) await server.stop()
    } catch (err) {
      log(`stopping socket server: ${err?.stack || err}`)
    }
    try {
      if (db && !db.closed) await db.close()
    } catch (err) {
      log(`closing database: ${err?.stack || err}`)
    }
    log('stopped')
    process.exit(0)
  })()
  return stopping
}

process.on('SIGTERM', () => shutdown('SIGTERM'))
process.on('SIGINT', () => shutdown('SIGINT'))
// The parent holds our stdin open; EOF means it is gone or wants us gone.
process.stdin.on('end', () => shutdown('stdin closed'))
process.stdin.on('error', () => shutdown('stdin error'))
process.stdin.resume()

function readTemplate() {
  if (template === '') return undefined
  try {
    return new Blob([fs.readFileSync(template)])
  } catch (err) {
    if (err?.code !== 'ENOENT') log(`reading template ${template}: ${err}`)
    return undefined
  }
}

// writeTemplate saves a pristine cluster for later in-memory starts. It
// writes a temporary file and renames it, so concurrent starts never read a
// half-written template.
async function writeTemplate() {
  if (template === '') return
  const tmp = `${template}.${process.pid}.tmp`
  try {
    const dump = await db.dumpDataDir('none')
    fs.writeFileSync(tmp, Buffer.from(await dump.arrayBuffer()))
    fs.renameSync(tmp, template)
  } catch (err) {
    log(`writing template ${template}: ${err}`)
    try {
      fs.rmSync(tmp, { force: true })
    } catch {}
  }
}

async function openDatabase() {
  const path = dataDir === '' ? 'memory://' : dataDir
  const loadDataDir = readTemplate()
  if (loadDataDir) {
    try {
      const d = new PGlite(path, { extensions: { vector }, loadDataDir })
      await d.waitReady
      return d
    } catch (err) {
      log(`template ${template} unusable, removing it: ${err}`)
      fs.rmSync(template, { force: true })
    }
  }
  const d = new PGlite(path, { extensions: { vector } })
  await d.waitReady
  db = d
  await writeTemplate()
  return d
}

try {
  db = await openDatabase()
  server = new PGLiteSocketServer({
    db,
    host: '127.0.0.1',
    port,
    maxConnections,
  })
  server.addEventListener('error', (ev) => {
    log(`socket server error: ${ev.detail?.stack || ev.detail}`)
  })
  patchQueue(server.queryQueue)
  await server.start()
  if (stopping) {
    await stopping
  } else {
    const addr = server.getServerConn() // "127.0.0.1:PORT"
    const boundPort = addr.slice(addr.lastIndexOf(':') + 1)
    process.stdout.write(`READY port=${boundPort}\n`)
  }
} catch (err) {
  const msg = String(err?.message || err).replace(/\s+/g, ' ')
  process.stdout.write(`ERROR ${msg}\n`)
  log(`startup failed: ${err?.stack || err}`)
  process.exit(1)
}
