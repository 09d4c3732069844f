CREATE TABLE "sms_days" (
	"day" date PRIMARY KEY NOT NULL,
	"sent" integer DEFAULT 0 NOT NULL,
	"refused" integer DEFAULT 0 NOT NULL,
	CONSTRAINT "sms_days_counts_non_negative" CHECK ("sms_days"."sent" >= 0 AND "sms_days"."refused" >= 0)
);
