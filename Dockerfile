# loopboard image for docker compose: web (gunicorn) or worker (celery), chosen by command.
FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY loopboard loopboard
COPY runs runs
COPY detection detection
RUN pip install --no-cache-dir .
COPY . .
RUN SECRET_KEY=build DATABASE_URL=postgres://build@localhost/build python manage.py collectstatic --noinput -v 0
EXPOSE 8000
CMD ["gunicorn", "loopboard.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3"]
