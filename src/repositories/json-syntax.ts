/**
 * The deepest nesting a fault's message locates: the data files need 4 levels, and the checker's
 * memory is bounded by it.
 */
export const MAX_DEPTH = 64

const UTF8_BOM = [0xef, 0xbb, 0xbf]

/** The length of the byte order mark `bytes` start with: 0 or 3. */
export const bomLength = (bytes: Uint8Array) => UTF8_BOM.every((byte, i) => bytes[i] === byte) ? UTF8_BOM.length : 0

// What the checker expects next.
const VALUE = 0
/** After `[`: a value or `]`. */
const FIRST_VALUE = 1
/** After `{`: a name or `}`. */
const FIRST_NAME = 2
/** After `,` in an object. */
const NAME = 3
const COLON = 4
/** After a value: `,` or the end of its container; at the top, only spaces. */
const NEXT = 5
const STRING = 6
/** Inside a string, between the bytes of one UTF-8 sequence. */
const UTF8 = 7
const ESCAPE = 8
const UNICODE_ESCAPE = 9
const LITERAL = 10
// Inside a number (RFC 8259 section 6): after `-`, after a leading 0, in the integer part, after
// `.`, in the fraction, after `e`, after the exponent's sign, in the exponent.
const MINUS = 11
const ZERO = 12
const INTEGER = 13
const DOT = 14
const FRACTION = 15
const EXPONENT_MARK = 16
const EXPONENT_SIGN = 17
const EXPONENT = 18

/** How much of a property name a message shows. */
const NAME_BYTES = 32
/** How many levels of the path (`[3].members[5].role`) a message shows. */
const PATH_LEVELS = 4

/** The bytes a string holds as they are: printable ASCII but a quote and a backslash. */
const PLAIN = new Uint8Array(256).map((_, c) => c >= 0x20 && c < 0x80 && c !== 0x22 && c !== 0x5c ? 1 : 0)

const isDigit = (c: number) => c >= 0x30 && c <= 0x39
const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
const isHex = (c: number) => isDigit(c) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46)

/**
 * Finds the first fault of a JSON text (RFC 8259), fed a chunk of bytes at a time, in memory bounded
 * by MAX_DEPTH: where JSON.parse refused a file, says where, and in which record and field, without
 * quoting the text (JSON.parse's own message quotes it, and may hold a key hash). The fault reads as
 * a message does after the file's name:
 * `not valid UTF-8 at byte 1234`, `nested deeper than 64 levels at line 1, column 65`, or
 * `not valid JSON at line 3, column 14 ([2].slug): expected ',' or '}'`, where the path names the
 * record and the field the scan was in (at most PATH_LEVELS levels, names cut to NAME_BYTES). A
 * column counts characters, as editors do, from the start of the line (after a byte order mark).
 * Not jsonc-parser, which takes the text as one string and recurses: docs/performance.md, "Reading and
 * checking JSON files".
 */
export class JsonChecker {
  /** What is wrong, once found. */
  private fault: string | undefined
  private offset = 0
  private state = VALUE
  private depth = 0
  /** Per open container, its closing byte. */
  private readonly closers = new Uint8Array(MAX_DEPTH)
  /** Per open array, the index of the element it is at. */
  private readonly indexes = new Float64Array(MAX_DEPTH)
  /**
   * Per open object, the first NAME_BYTES of the name it is at, and that name's length in bytes (-1
   * when it is at none): kept as bytes, made text only for a message.
   */
  private readonly names = Buffer.alloc(MAX_DEPTH * NAME_BYTES)
  private readonly nameLengths = new Int32Array(MAX_DEPTH)
  private line = 1
  private lineStart = 0
  /** UTF-8 continuation bytes met on the line: a column counts characters, not bytes. */
  private continuations = 0
  private inName = false
  /** The length of the name being read so far, and where it starts in the current chunk. */
  private nameLength = 0
  private nameFrom = 0
  /** Where the construct being read started: a UTF-8 sequence, an escape, a literal, a number. */
  private startedAt = 0
  private remaining = 0
  /** The range of the next byte of a UTF-8 sequence. */
  private low = 0x80
  private high = 0xbf
  private literal = ''
  /** Where the number being read could have ended, before a `.` or an `e` with nothing after it; -1 if nowhere. */
  private numberEnd = -1
  /**
   * The elements of a top-level array, for readJsonArray, by offset from the text's start: how many
   * ended so far; of the last write, where the first element that starts in it starts and where the
   * first and last that end in it end; where the element still open starts (-1: none).
   */
  elements = 0
  firstStart = -1
  firstEnd = -1
  lastEnd = -1
  openStart = -1

  /** Whether the text's value is an array (an object), once its first byte is read. */
  get isArray () {
    return this.closers[0] === 0x5d
  }

  get isObject () {
    return this.closers[0] === 0x7d
  }

  /** Checks the next bytes of the text; false once a fault is found. */
  write (bytes: Uint8Array): boolean {
    let i = 0
    // The first chunk holds the first three bytes, or is the whole text.
    if (this.offset === 0) this.lineStart = i = bomLength(bytes)
    this.nameFrom = 0
    this.firstStart = this.firstEnd = this.lastEnd = -1
    for (const n = bytes.length; i < n && this.fault === undefined;) {
      const c = bytes[i]!
      const at = this.offset + i
      switch (this.state) {
        case STRING: {
          // Most of a file: the plain characters of strings, in a tight loop.
          if (PLAIN[c] === 1) {
            do i++; while (i < n && PLAIN[bytes[i]!] === 1)
            continue
          }
          if (c === 0x22) this.endString(bytes, i)
          else if (c === 0x5c) this.start(ESCAPE, at)
          else if (c < 0x20) this.syntax(at, 'a control character inside a string')
          else this.startUtf8(c, at)
          break
        }
        case UTF8:
          if (c < this.low || c > this.high) {
            this.fault = `not valid UTF-8 at byte ${this.startedAt}`
            break
          }
          this.continuations++
          this.low = 0x80
          this.high = 0xbf
          if (--this.remaining === 0) this.state = STRING
          break
        case ESCAPE:
          if (c === 0x75) {
            this.state = UNICODE_ESCAPE
            this.remaining = 4
          } else if ('"\\/bfnrt'.includes(String.fromCharCode(c))) {
            this.state = STRING
          } else {
            this.syntax(this.startedAt, 'an invalid escape sequence')
          }
          break
        case UNICODE_ESCAPE:
          if (!isHex(c)) this.syntax(this.startedAt, 'an invalid escape sequence')
          else if (--this.remaining === 0) this.state = STRING
          break
        case LITERAL:
          if (c !== this.literal.charCodeAt(this.remaining)) this.syntax(this.startedAt, 'expected a value')
          else if (++this.remaining === this.literal.length) this.ended(at + 1)
          break
        case MINUS: case DOT: case EXPONENT_MARK: case EXPONENT_SIGN:
          // A digit must follow.
          if (isDigit(c)) this.state = this.state === MINUS ? (c === 0x30 ? ZERO : INTEGER) : this.state === DOT ? FRACTION : EXPONENT
          else if (this.state === EXPONENT_MARK && (c === 0x2b || c === 0x2d)) this.state = EXPONENT_SIGN
          else if (this.numberEnd < 0) this.syntax(this.startedAt, 'expected a value')
          else this.syntax(this.numberEnd, this.afterValue())
          break
        case ZERO: case INTEGER: case FRACTION: case EXPONENT:
          if (isDigit(c) && this.state !== ZERO) {
            do i++; while (i < n && isDigit(bytes[i]!))
            continue
          }
          if (c === 0x2e && this.state !== FRACTION && this.state !== EXPONENT) {
            this.state = DOT
            this.numberEnd = at
          } else if ((c === 0x65 || c === 0x45) && this.state !== EXPONENT) {
            this.state = EXPONENT_MARK
            this.numberEnd = at
          } else {
            // The number ended before this byte, which is read again after it.
            this.ended(at)
            continue
          }
          break
        default:
          if (c === 0x20) {
            // The indentation of a file written with JSON.stringify(records, null, 2), in a tight loop.
            do i++; while (i < n && bytes[i] === 0x20)
            continue
          }
          if (isSpace(c)) {
            if (c === 0x0a) {
              this.line++
              this.lineStart = at + 1
              this.continuations = 0
            }
          } else if (this.state === COLON) {
            if (c === 0x3a) this.state = VALUE
            else this.syntax(at, "expected ':' after a property name")
          } else if (this.state === NEXT) {
            this.next(c, at)
          } else if (this.state === FIRST_NAME || this.state === NAME) {
            if (c === 0x7d && this.state === FIRST_NAME) this.close(at)
            else if (c === 0x22) this.startName(i + 1)
            else this.syntax(at, 'expected a property name in double quotes')
          } else if (c === 0x5d && this.state === FIRST_VALUE) {
            this.close(at)
          } else {
            this.value(c, at)
          }
      }
      i++
    }
    if (this.inName) this.keepName(bytes, bytes.length)
    this.offset += bytes.length
    return this.fault === undefined
  }

  /** The fault, if any, once the whole text was written. */
  end (): string | undefined {
    if (this.fault !== undefined) return this.fault
    const at = this.offset
    switch (this.state) {
      case STRING: this.syntax(at, 'a string that is never closed'); break
      case UTF8: this.fault = `not valid UTF-8 at byte ${this.startedAt}`; break
      case ESCAPE: case UNICODE_ESCAPE: this.syntax(this.startedAt, 'an invalid escape sequence'); break
      case LITERAL: case MINUS: this.syntax(this.startedAt, 'expected a value'); break
      case DOT: case EXPONENT_MARK: case EXPONENT_SIGN: this.syntax(this.numberEnd, this.afterValue()); break
      case FIRST_NAME: case NAME: this.syntax(at, 'expected a property name in double quotes'); break
      case COLON: this.syntax(at, "expected ':' after a property name"); break
      case VALUE: case FIRST_VALUE: this.syntax(at, 'the text ends where a value is expected'); break
      default:
        // After a value, a number included: the text may end only at the top.
        if (this.depth > 0) this.syntax(at, this.afterValue())
    }
    return this.fault
  }

  private value (c: number, at: number) {
    if (this.depth === 1 && this.isArray) {
      if (this.firstStart < 0) this.firstStart = at
      this.openStart = at
    }
    if (c === 0x7b || c === 0x5b) {
      if (this.depth === MAX_DEPTH) {
        this.fault = `nested deeper than ${MAX_DEPTH} levels at ${this.lineAndColumn(at)}`
        return
      }
      this.closers[this.depth] = c + 2
      this.indexes[this.depth] = 0
      this.nameLengths[this.depth++] = -1
      this.state = c === 0x5b ? FIRST_VALUE : FIRST_NAME
    } else if (c === 0x22) {
      this.state = STRING
      this.inName = false
    } else if (c === 0x2d || isDigit(c)) {
      this.start(c === 0x2d ? MINUS : c === 0x30 ? ZERO : INTEGER, at)
      this.numberEnd = -1
    } else if (c === 0x74 || c === 0x66 || c === 0x6e) {
      this.start(LITERAL, at)
      this.remaining = 1
      this.literal = c === 0x74 ? 'true' : c === 0x66 ? 'false' : 'null'
    } else {
      this.syntax(at, 'expected a value')
    }
  }

  /** After a value: a comma, the end of its container. */
  private next (c: number, at: number) {
    const closer = this.closers[this.depth - 1]
    if (this.depth === 0) {
      this.syntax(at, 'unexpected text after the end of the value')
    } else if (c === closer) {
      this.close(at)
    } else if (c !== 0x2c) {
      this.syntax(at, this.afterValue())
    } else if (closer === 0x5d) {
      this.indexes[this.depth - 1] = this.indexes[this.depth - 1]! + 1
      this.state = VALUE
    } else {
      this.nameLengths[this.depth - 1] = -1
      this.state = NAME
    }
  }

  /** Enters a construct that a fault may be reported at the start of. */
  private start (state: number, at: number) {
    this.state = state
    this.startedAt = at
  }

  private startName (from: number) {
    this.state = STRING
    this.inName = true
    this.nameFrom = from
    this.nameLength = 0
  }

  private close (at: number) {
    this.depth--
    this.ended(at + 1)
  }

  /** A value ended before `end`. */
  private ended (end: number) {
    this.state = NEXT
    if (this.depth !== 1 || !this.isArray) return
    this.elements++
    if (this.firstEnd < 0) this.firstEnd = end
    this.lastEnd = end
    this.openStart = -1
  }

  private afterValue () {
    return this.depth === 0 ? 'unexpected text after the end of the value' : `expected ',' or '${String.fromCharCode(this.closers[this.depth - 1]!)}'`
  }

  private startUtf8 (lead: number, at: number) {
    const length = lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0
    if (length === 0) {
      this.fault = `not valid UTF-8 at byte ${at}`
      return
    }
    // The second byte's range depends on the lead byte (this is what excludes the overlong forms,
    // the surrogates and what lies past U+10FFFF); the others are plain continuation bytes.
    this.low = lead === 0xe0 ? 0xa0 : lead === 0xf0 ? 0x90 : 0x80
    this.high = lead === 0xed ? 0x9f : lead === 0xf4 ? 0x8f : 0xbf
    this.start(UTF8, at)
    this.remaining = length - 1
  }

  private endString (bytes: Uint8Array, quote: number) {
    if (!this.inName) {
      this.ended(this.offset + quote + 1)
      return
    }
    this.keepName(bytes, quote)
    this.nameLengths[this.depth - 1] = this.nameLength
    this.inName = false
    this.state = COLON
  }

  /** Keeps the first NAME_BYTES of a name, from `nameFrom` to `end` of this chunk. */
  private keepName (bytes: Uint8Array, end: number) {
    const slot = (this.depth - 1) * NAME_BYTES
    const kept = Math.min(end - this.nameFrom, NAME_BYTES - Math.min(this.nameLength, NAME_BYTES))
    for (let i = 0; i < kept; i++) this.names[slot + this.nameLength + i] = bytes[this.nameFrom + i]!
    this.nameLength += end - this.nameFrom
  }

  private syntax (at: number, problem: string) {
    const path = this.path()
    this.fault = `not valid JSON at ${this.lineAndColumn(at)}${path === '' ? '' : ` (${path})`}: ${problem}`
  }

  /** Where the scan is, as a reader points into the file: `[2].members[5].role`. */
  private path () {
    let path = ''
    for (let level = 0; level < Math.min(this.depth, PATH_LEVELS); level++) {
      const length = this.nameLengths[level]!
      if (this.closers[level] === 0x5d) path += `[${this.indexes[level]}]`
      else if (length >= 0) path += pathName(this.names.subarray(level * NAME_BYTES, level * NAME_BYTES + Math.min(length, NAME_BYTES)), length > NAME_BYTES)
    }
    return (this.depth > PATH_LEVELS ? `${path}…` : path).replace(/^\./, '')
  }

  /** Every byte from the start of the line to `at` is one already checked, on this line. */
  private lineAndColumn (at: number) {
    return `line ${this.line}, column ${at - this.lineStart - this.continuations + 1}`
  }
}

/**
 * A name as a path shows it: `.role`, or `["two words"]` (quoted, so that the message stays one line);
 * its raw bytes, which a name cut short may end in the middle of.
 */
function pathName (raw: Buffer, cut: boolean): string {
  const text = cut ? `${raw.toString()}…` : JSON.parse(`"${raw.toString()}"`) as string
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(text) ? `.${text}` : `[${JSON.stringify(text)}]`
}
