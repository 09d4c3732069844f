/**
 * Iranian mobile numbers, normalised before anything else (rate limits, codes, accounts) so that
 * `09121234567`, `+98 912 123 4567`, `00989121234567`, `9121234567` and the same in Persian
 * (۰۹۱۲…) or Arabic-Indic (٠٩١٢…) digits are one phone: `+989121234567` (E.164).
 */

const PERSIAN_ZERO = 0x06f0;
const ARABIC_ZERO = 0x0660;

/** Persian and Arabic-Indic digits → ASCII; everything else unchanged. */
export function asciiDigits(text: string): string {
  let out = "";
  for (const char of text) {
    const c = char.codePointAt(0)!;
    if (c >= PERSIAN_ZERO && c <= PERSIAN_ZERO + 9) out += String(c - PERSIAN_ZERO);
    else if (c >= ARABIC_ZERO && c <= ARABIC_ZERO + 9) out += String(c - ARABIC_ZERO);
    else out += char;
  }
  return out;
}

/** Separators people type inside a number. */
const SEPARATORS = /[\s\-().\u200c\u200f\u200e]/g;
/** An Iranian mobile number after the country code: 9 then nine digits. */
const MOBILE = /^9\d{9}$/;
export const PHONE_INPUT_CHARS_MAX = 32;

/**
 * `+989121234567`, or null when the input is not an Iranian mobile number.
 * @example normalisePhone("۰۹۱۲ ۱۲۳ ۴۵۶۷") === "+989121234567"
 */
export function normalisePhone(input: string): string | null {
  if (input.length > PHONE_INPUT_CHARS_MAX) return null;
  let digits = asciiDigits(input).replace(SEPARATORS, "");
  if (digits.startsWith("+98")) digits = digits.slice(3);
  else if (digits.startsWith("0098")) digits = digits.slice(4);
  else if (digits.startsWith("98") && digits.length === 12) digits = digits.slice(2);
  else if (digits.startsWith("0")) digits = digits.slice(1);
  return MOBILE.test(digits) ? `+98${digits}` : null;
}

/** The national form an Iranian SMS provider expects: `09121234567`. */
export function nationalPhone(e164: string): string {
  return `0${e164.slice(3)}`;
}

/** `+98912•••4567`: enough for the owner to recognise, for logs and lists. */
export function maskPhone(e164: string): string {
  return `${e164.slice(0, 6)}•••${e164.slice(-4)}`;
}
