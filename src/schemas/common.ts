import { Type, type TSchema } from '@sinclair/typebox'
import './formats.js'

export function Nullable<T extends TSchema> (schema: T) {
  return Type.Union([schema, Type.Null()])
}

export const ErrorSchema = Type.Object({
  error: Type.Object({
    code: Type.Integer({ description: 'Numeric error code, equal to the HTTP status' }),
    message: Type.String({ description: 'Human-readable message' }),
    metadata: Type.Optional(Nullable(Type.Record(Type.String(), Type.Unknown())))
  }, { additionalProperties: false })
}, { $id: 'Error', additionalProperties: false, description: 'The error body shared by every failure' })
